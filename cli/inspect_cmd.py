"""`shardkit inspect` (what a dataset holds) and `shardkit show` (one document's ids and text)."""

from __future__ import annotations

import json

import click

from shardkit.engine.packing_report import packing_report
from shardkit.inspect import DatasetSummary, bin_label, inspect_dataset, plot_summary, show_document
from shardkit.loader import Loader
from shardkit.units import human_bytes, human_count

from .options import check_dataset_arg, json_option, remote_dataset_options
from .stream_cmd import packing_lines

__all__ = ["inspect_cmd", "render_summary", "show_cmd"]

BAR_WIDTH = 40


@click.command("inspect")
@click.argument("dataset")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True), default=None,
              metavar="FILE.png", help="Also draw the length histogram and tokens per shard (needs shardkit[plot]).")
@click.option("--packing", type=click.Choice(["first_fit", "best_fit"]), default=None,
              help="Also report what packing documents into rows of --seq-len does: rows, padding, documents "
                   "split, per-rank attention balance.")
@click.option("--seq-len", type=click.IntRange(min=1), default=2048, show_default=True,
              help="With --packing: the row length.")
@click.option("--world-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="With --packing: ranks for the attention-balance figures.")
@click.option("--batch", "batch_size", type=click.IntRange(min=1), default=64, show_default=True,
              help="With --packing: the global batch size for the balance figures.")
@click.option("--packing-cache-dir", type=click.Path(file_okay=False), default=None,
              help="Where packing tables are kept [default: $SHARDKIT_PACK_CACHE_DIR, else ~/.cache/shardkit/packing].")
@remote_dataset_options
@json_option
def inspect_cmd(dataset, plot_path, packing, seq_len, world_size, batch_size, packing_cache_dir, cache_dir,
                cache_limit, storage_options, as_json):
    """Summarise DATASET: tokenizer, dtype, sizes, sources, document-length percentiles and histogram.

    DATASET is a directory or a URL (s3://, gs://, ...): then only the manifest and indexes are fetched.
    """
    check_dataset_arg(dataset, cache_dir, cache_limit, storage_options)
    summary = inspect_dataset(dataset.removeprefix("file://"), cache_dir=cache_dir, cache_limit=cache_limit,
                              storage_options=storage_options)
    packed = None
    if packing is not None:
        if batch_size % world_size:
            raise click.UsageError(f"--batch {batch_size} is not divisible by --world-size {world_size}")
        loader = Loader(dataset.removeprefix("file://"), seq_len=seq_len, packing=packing, batch_schedule=batch_size,
                        packing_cache_dir=packing_cache_dir, rank=0, world_size=world_size, readahead=False)
        packed = packing_report(loader, world_size=world_size)
        loader.close()
    if plot_path:
        plot_summary(summary, plot_path)
    if as_json:
        click.echo(json.dumps({**summary.to_json(), **({"packing": packed} if packed else {})}, indent=2))
        return
    click.echo(render_summary(summary))
    if packed is not None:
        click.echo(packing_lines(packed).replace("  packing", "packing   ", 1))
    if plot_path:
        click.echo(f"plot written to {plot_path}")


def _tokenizer_line(tok: dict | None) -> str:
    if tok is None:
        return "none recorded"
    parts = [f"vocab {tok.get('vocab_size'):,}" if isinstance(tok.get("vocab_size"), int) else "vocab ?"]
    parts += [f"{k[:3]} {tok[k]}" for k in ("eos_id", "bos_id") if tok.get(k) is not None]
    sha = f", sha256 {tok['sha256'][:12]}" if isinstance(tok.get("sha256"), str) else ""
    return f"{tok.get('kind')} {tok.get('name') or ''} ({', '.join(parts)}{sha})".replace("  ", " ")


def render_summary(s: DatasetSummary) -> str:
    L = s.lengths
    markers = [m for m, on in (("EOS appended", s.eos_appended), ("BOS prepended", s.bos_prepended)) if on]
    tps = s.tokens_per_shard
    lines = [
        f"dataset    {s.path} (fingerprint {s.fingerprint[:16]})",
        f"tokenizer  {_tokenizer_line(s.tokenizer)}",
        f"dtype      {s.dtype}" + (f"; {', '.join(markers)}" if markers else ""),
        f"shards     {s.shards:,}" + (f" (tokens per shard: min {human_count(min(tps))}, "
                                      f"max {human_count(max(tps))})" if tps else ""),
        f"docs       {s.docs:,}" + (f" ({s.skipped:,} skipped at pack time)" if s.skipped else ""),
        f"tokens     {s.tokens:,} ({human_count(s.tokens)})",
        f"bytes      {human_bytes(s.bin_bytes)} of tokens, {human_bytes(s.disk_bytes)} on disk",
    ]
    lines += compression_lines(s)
    if s.sources:
        width = max(len(src["name"]) for src in s.sources)
        lines.append("sources")
        lines += [f"  {src['name']:<{width}}  {src['docs']:>12,} docs  {src['tokens']:>16,} tokens  "
                  f"{src['share']:7.2%}" + (f"  ({src['skipped']:,} skipped)" if src["skipped"] else "")
                  for src in s.sources]
    lines.append(f"lengths    mean {L.mean:,.1f} · min {L.min:,} · p50 {L.p50:,} · p90 {L.p90:,} · p99 {L.p99:,} · "
                 f"max {L.max:,} tokens")
    lines += histogram_lines(s.histogram, s.empty_docs)
    return "\n".join(lines)


def compression_lines(s: DatasetSummary, max_shards: int = 20) -> list[str]:
    """Total compression ratio, then one line per compressed shard (or the extremes, for many shards)."""
    c = s.compression
    if not c:
        return []
    kinds = sorted({f"{x['codec']} level {x['level']}, {human_bytes(x['frame_size'])} frames" for x in c})
    stored = sum(x["file_bytes"] for x in c)
    lines = [f"compressed {len(c):,} of {s.shards:,} shard(s) ({'; '.join(kinds)}): "
             f"{human_bytes(sum(x['bin_bytes'] for x in c))} → {human_bytes(stored)}, ratio {s.compression_ratio:.2f}×"]
    rows = c if len(c) <= max_shards else sorted(c, key=lambda x: x["ratio"])
    if len(c) > max_shards:
        rows = [rows[0], rows[-1]]
        lines.append(f"  lowest and highest ratio of {len(c):,} shards:")
    width = max(len(x["shard"]) for x in rows)
    lines += [f"  {x['shard']:<{width}}  {human_bytes(x['bin_bytes']):>10} → {human_bytes(x['file_bytes']):>10}  "
              f"{x['ratio']:.2f}×" for x in rows]
    return lines


def histogram_lines(counts: list[int], empty: int = 0) -> list[str]:
    """Text bars for the log2 histogram, from the first to the last non-empty bin."""
    rows = [("0", empty)] if empty else []
    nz = [i for i, c in enumerate(counts) if c]
    if nz:
        rows += [(bin_label(i), counts[i]) for i in range(nz[0], nz[-1] + 1)]
    if not rows:
        return []
    total = sum(c for _, c in rows)
    peak = max(c for _, c in rows)
    w = max(len(label) for label, _ in rows)
    cw = len(f"{peak:,}")
    out = ["histogram  documents by length in tokens"]
    zeros: list[str] = []
    for label, c in rows:
        if not c:
            zeros.append(f"  {label:>{w}}  {0:>{cw}}  {0:6.1%}")
            continue
        out += zeros if len(zeros) <= 2 else [zeros[0], f"  {'…':>{w}}"]  # long empty runs fold to one row
        zeros = []
        bar = "█" * round(BAR_WIDTH * c / peak) or "▏"
        out.append(f"  {label:>{w}}  {c:>{cw},}  {c / total:6.1%}  {bar}")
    return out


@click.command("show")
@click.argument("dataset")
@click.argument("doc", type=click.IntRange(min=0))
@click.option("--max-tokens", type=click.IntRange(min=0), default=4096, show_default=True,
              help="Print at most this many tokens (0: all).")
@click.option("--no-text", is_flag=True, help="Print ids only; do not load the tokenizer.")
@click.option("--tokenizer", default=None, metavar="SPEC",
              help="Tokenizer to decode with (default: the recorded one, only if its file is in the dataset).")
@remote_dataset_options
@json_option
def show_cmd(dataset, doc, max_tokens, no_text, tokenizer, cache_dir, cache_limit, storage_options, as_json):
    """Print document DOC of DATASET (0-based, over all shards): its token ids and decoded text.

    DATASET is a directory or a URL (s3://, gs://, ...): then only the shard holding DOC is fetched.
    """
    check_dataset_arg(dataset, cache_dir, cache_limit, storage_options)
    v = show_document(dataset.removeprefix("file://"), doc, max_tokens=max_tokens or None, decode=not no_text,
                      tokenizer=tokenizer, cache_dir=cache_dir, cache_limit=cache_limit,
                      storage_options=storage_options)
    if as_json:
        click.echo(json.dumps(v.to_json(), indent=2, ensure_ascii=False))
        return
    cut = f", first {v.tokens.size:,} shown" if v.tokens.size < v.total_tokens else ""
    ident = f", id {json.dumps(v.doc_id, ensure_ascii=False)}" if v.doc_id is not None else ""
    click.echo(f"document {v.doc:,}: {v.shard} #{v.doc_in_shard:,}, {v.total_tokens:,} tokens{cut}{ident}")
    click.echo("ids: " + " ".join(map(str, v.tokens.tolist())))
    for n in v.notes:
        click.echo(f"note: {n}")
    if v.text is not None:
        click.echo("text:")
        click.echo(v.text)
