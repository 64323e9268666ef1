"""`shardkit pack`: tokenize inputs into a dataset directory."""

from __future__ import annotations

import json

import click

from shardkit.errors import ConfigError
from shardkit.pack import OnError, PackConfig, PackResult, ResumeMode, TokenizeOptions, pack
from shardkit.pack.budget import DEFAULT_MAX_SKIP_FRACTION
from shardkit.pack.dry_run import plan_pack
from shardkit.readers import ReaderConfig
from shardkit.remote.upload import UploadReport, UploadVerify
from shardkit.units import human_bytes, human_count, parse_shard_size
from shardkit.writer import Codec, CompressionConfig, ShardLimits

from .options import ByteSize, json_option, load_pack_config, storage_option_flag
from .progress import StatusLine, format_duration, pack_status
from .scale_out import run_scaled, scale_out_options


def _shard_size(ctx, param, value):
    try:
        return parse_shard_size(value)
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None


@click.command("pack")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), is_eager=True,
              expose_value=False, callback=load_pack_config,
              help="A YAML/TOML/JSON file of pack options, keyed like the flags (inputs, output, tokenizer, "
                   "shard-size, ...); flags on the command line override it.")
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False),
              help="Dataset directory to write, or a URL (s3://bucket/ds, any fsspec URL): staged locally, then uploaded.")
@click.option("-t", "--tokenizer", default=None,
              help="Required. A tokenizer.json path (or its directory), a Hugging Face name cached locally "
                   "('gpt2'), 'tiktoken:FILE', a SentencePiece .model, or 'bytes' for raw UTF-8 bytes.")
@click.option("--tokenizer-backend", type=click.Choice(["auto", "hf", "tiktoken", "fastokens"]), default="auto",
              show_default=True, help="auto: the fastest backend found exact (fastokens, the tiktoken fast path), "
                                      "else tokenizers.")
@click.option("-w", "--workers", type=click.IntRange(min=0), default=0,
              help="Tokenizer processes (0 = one per core, or 1 on a machine of one or two cores; 1 = this "
                   "process, reading and tokenizing in threads beside the writer).")
@click.option("--shard-size", default="1GiB", show_default=True, callback=_shard_size,
              help="Roll over to a new shard at this size: bytes ('1GiB', '256MB') or tokens ('500M tokens').")
@click.option("--checksum-block-size", type=ByteSize(), default="16MiB", show_default=True,
              help="Block size of the per-shard checksums.")
@click.option("--compression", type=click.Choice([c.value for c in Codec]), default="none", show_default=True,
              help="zstd: store shards as NAME.bin.zst in independent frames (random access; not Megatron-readable).")
@click.option("--compression-level", type=click.IntRange(1, 22), default=None,
              help="zstd level (default 3; 1 fastest, 19+ slow to write, all equally fast to read).")
@click.option("--frame-size", type=ByteSize(), default=None,
              help="Uncompressed bytes per zstd frame, the unit of random access (default 1MiB).")
@click.option("--text-field", default="text", show_default=True, help="JSON/Parquet field with the text (dotted for nested).")
@click.option("--id-field", default=None, help="Field kept per document in an NAME.ids.jsonl sidecar.")
@click.option("--encoding-errors", type=click.Choice(["strict", "replace", "skip"]), default="strict",
              show_default=True, help="Invalid UTF-8: strict: the record is bad (counts against "
              "--max-skip-fraction); replace: keep it, bad bytes become U+FFFD; skip: drop it, reported but "
              "not counted.")
@click.option("--eos/--no-eos", default=True, show_default=True, help="Append the tokenizer's EOS to every document.")
@click.option("--bos/--no-bos", default=False, show_default=True, help="Prepend the tokenizer's BOS to every document.")
@click.option("--on-error", type=click.Choice(["skip", "fail"]), default="skip", show_default=True,
              help="skip: count and report bad records; fail: stop at the first one (exit 1).")
@click.option("--max-skip-fraction", type=click.FloatRange(0.0, 1.0), default=DEFAULT_MAX_SKIP_FRACTION,
              show_default=True, help="The skip budget: with --on-error skip, fail (exit 1, no manifest) when "
              "more than this share of records or input bytes was skipped. 1 turns it off.")
@click.option("--resume/--no-resume", default=None,
              help="Default: finish an unfinished pack of the same job if one is there. --resume insists on one.")
@click.option("--overwrite", is_flag=True, help="Replace a finished dataset or unfinished pack in OUTPUT.")
@storage_option_flag
@click.option("--staging-dir", type=click.Path(file_okay=False), default=None,
              help="Remote OUTPUT: where to pack before uploading (default $SHARDKIT_STAGING_DIR, else the temp dir).")
@click.option("--upload-verify", type=click.Choice([v.value for v in UploadVerify]), default="full", show_default=True,
              help="Remote OUTPUT: full reads every uploaded file back and compares digests; size compares sizes.")
@scale_out_options
@click.option("--dry-run", is_flag=True,
              help="Write nothing: list the inputs, estimate tokens and shards from a sample, show the output.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line.")
@json_option
def pack_cmd(inputs, output, tokenizer, tokenizer_backend, workers, shard_size, checksum_block_size, compression,
             compression_level, frame_size, text_field, id_field, encoding_errors, eos, bos, on_error,
             max_skip_fraction, resume, overwrite, dry_run, quiet, as_json, storage_options, staging_dir,
             upload_verify, **scale_out):
    """Tokenize INPUTS (files, directories, globs or URLs of JSONL/Parquet/text/Arrow, or Hugging Face
    save_to_disk directories) into a dataset at OUTPUT."""
    if tokenizer is None:
        raise click.UsageError("--tokenizer is required: a tokenizer.json path, a Hugging Face name cached "
                               "locally (e.g. gpt2), tiktoken:FILE, a SentencePiece .model - or "
                               "'--tokenizer bytes' to pack raw UTF-8 bytes (ids 0-255, for tests and demos)")
    if compression == Codec.NONE.value and (compression_level is not None or frame_size is not None):
        raise click.UsageError("--compression-level and --frame-size need --compression zstd")
    try:
        compress = CompressionConfig(codec=Codec(compression), level=compression_level or 3,
                                     **({"frame_size": frame_size} if frame_size is not None else {}))
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--frame-size") from None
    config = PackConfig(
        inputs=tuple(inputs),
        output=output,
        tokenize=TokenizeOptions(tokenizer=tokenizer, backend=tokenizer_backend, append_eos=eos, prepend_bos=bos),
        reader=ReaderConfig(text_field=text_field, id_field=id_field, encoding_errors=encoding_errors),
        limits=ShardLimits(max_bytes=shard_size.max_bytes, max_tokens=shard_size.max_tokens,
                           checksum_block_size=checksum_block_size),
        compression=compress,
        on_error=OnError(on_error),
        max_skip_fraction=max_skip_fraction,
        workers=workers,
        overwrite=overwrite,
        resume={None: ResumeMode.AUTO, True: ResumeMode.REQUIRE, False: ResumeMode.NEVER}[resume],
        storage_options=storage_options,
        staging_dir=staging_dir,
        upload_verify=UploadVerify(upload_verify),
    )
    if dry_run:
        plan = plan_pack(config)
        click.echo(json.dumps(plan.to_json(), indent=2) if as_json else plan.render())
        return
    if run_scaled(config, scale_out, quiet=quiet, as_json=as_json):  # --num-tasks: a part, or tasks + merge
        return
    status = StatusLine(enabled=not quiet and not as_json)
    try:
        result = pack(config, progress=lambda p: status.update(pack_status(p)),
                      upload_progress=lambda done, total: status.update(
                          f"uploading {human_bytes(done)} / {human_bytes(total)}"))
    finally:
        status.close()
    if as_json:
        click.echo(json.dumps(result_json(result), indent=2))
    else:
        click.echo(summary_text(result))


def result_json(r: PackResult) -> dict:
    m = r.manifest
    return {
        "path": r.remote_url or str(r.path), "fingerprint": r.fingerprint, "shards": len(m.shards), "docs": m.num_docs,
        "tokens": m.num_tokens, "dtype": m.dtype, "seconds": round(r.elapsed, 3), "workers": r.workers,
        "tokenizer_backend": r.tokenizer_backend, "tokenizer_note": r.tokenizer_note,
        "resumed_shards": r.resumed_shards, "input_files": r.input_files, "input_bytes": r.input_bytes,
        **({"upload": upload_json(r.upload)} if r.upload is not None else {}),
        "skipped": r.stats["skipped"], "empty_files": r.empty_files, "stored_bytes": sum(s.data_bytes for s in m.shards),
    }


def upload_json(u: UploadReport) -> dict:
    return {"uploaded": len(u.uploaded), "kept": len(u.kept), "removed": len(u.removed),
            "bytes_uploaded": u.bytes_uploaded, "seconds": round(u.seconds, 3)}


def summary_text(r: PackResult) -> str:
    m = r.manifest
    el = max(r.elapsed, 1e-9)
    lines = [
        f"packed {r.input_files} file(s), {human_bytes(r.input_bytes)} → {r.remote_url or r.path}",
        f"  {human_count(m.num_docs)} docs, {human_count(m.num_tokens)} tokens ({m.dtype}) in {len(m.shards)} "
        f"shard(s), {human_bytes(sum(s.bin_bytes for s in m.shards))}",
        f"  {format_duration(r.elapsed)}: {human_count(m.num_tokens / el)} tok/s, "
        f"{r.input_bytes / el / 1e6:.1f} MB/s, {r.workers} worker(s), tokenizer backend {r.tokenizer_backend}",
        f"  fingerprint {r.fingerprint[:16]}",
    ]
    if m.compressed:
        raw, stored = sum(s.bin_bytes for s in m.shards), sum(s.data_bytes for s in m.shards)
        lines.insert(2, f"  compressed (zstd) to {human_bytes(stored)}, ratio {raw / max(stored, 1):.2f}×")
    if r.tokenizer_note:
        lines.append(f"  note: {r.tokenizer_note}")
    if r.upload is not None:
        u = r.upload
        lines.append(f"  uploaded {len(u.uploaded)} file(s), {human_bytes(u.bytes_uploaded)} in {format_duration(u.seconds)}"
                     + (f"; {len(u.kept)} already there and verified" if u.kept else ""))
    if r.resumed_shards:
        lines.append(f"  resumed: {r.resumed_shards} shard(s) kept from the interrupted run")
    sk = r.stats["skipped"]
    if sk["count"]:
        reasons = ", ".join(f"{k}: {v}" for k, v in sk["by_reason"].items())
        lines.append(f"  skipped {sk['count']} record(s) ({reasons}); first:")
        lines += [f"    {e['location']}: {e['reason']}" for e in sk["examples"][:5]]
    else:
        lines.append("  skipped 0 records")
    shown = {f"{e['location']}: {e['reason']}" for e in sk["examples"][:5]}
    unseen = [e for e in r.empty_files if e["first_problem"] not in shown]
    if r.empty_files:
        lines.append(f"  {len(r.empty_files)} file(s) yielded no document"
                     + ("; the first problem of each:" if unseen else " (their problems are listed above)"))
        lines += [f"    {e['first_problem']}" for e in unseen[:10]]
    return "\n".join(lines)
