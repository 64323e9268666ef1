"""`shardkit stream`: dry-run the loader — tokens/s, batches, and a digest of what was delivered.

`shardkit stream DATASET` runs the single-source loader (DATASET: a directory, or a remote URL such as
s3://bucket/ds streamed through the local block cache); `shardkit stream --recipe recipe.yaml` runs a
mixture and ends with a table of what each source gave.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import click
from click.core import ParameterSource

from shardkit.engine.accounting_plot import write_accounting_plot
from shardkit.engine.packing_report import packing_report
from shardkit.errors import ConfigError
from shardkit.format import MANIFEST_NAME
from shardkit.loader import Loader, MixtureLoader
from shardkit.megatron.options import split_data_path
from shardkit.mixture import RecipeWarning
from shardkit.mixture.megatron_recipe import read_recipe
from shardkit.mixture.recipe import Recipe
from shardkit.order import Ramp
from shardkit.stream import StreamReport, stream
from shardkit.units import human_count

from .accounting_table import accounting_table
from .options import (
    ByteSize,
    check_dataset_arg,
    json_option,
    skip_option,
    storage_option_flag,
    verify_options,
)
from .progress import StatusLine

_LOADER_ONLY = ("seq_len", "batch_size", "ramp", "seed", "shuffle", "max_epochs", "packing", "order")  # the recipe sets these


def _ramp(ctx, param, value):
    if value is None:
        return None
    try:
        start, inc, samples, final = (int(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter("expected START,INCREMENT,RAMP_SAMPLES,FINAL, e.g. 16,16,100000,256") from None
    return Ramp(start=start, increment=inc, ramp_samples=samples, final=final)


@click.command("stream")
@click.argument("dataset", required=False)
@click.option("--recipe", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Stream a mixture recipe (YAML, TOML or JSON) instead of one DATASET.")
@click.option("--strict", is_flag=True, help="With --recipe: refuse mix weights that do not sum to 1.")
@click.option("--seq-len", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--batch", "batch_size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Global batch size (constant schedule).")
@click.option("--ramp", callback=_ramp, default=None, help="Megatron-style ramp START,INCREMENT,RAMP_SAMPLES,FINAL.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--shuffle", type=click.Choice(["none", "block", "full"]), default="block", show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=200, show_default=True,
              help="Batches to deliver (this rank's part of each global batch).")
@click.option("--start-step", type=click.IntRange(min=0), default=0, help="Begin at this global batch (resume).")
@click.option("--rank", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--world-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="torch DataLoader workers (needs torch).")
@click.option("--max-epochs", type=click.IntRange(min=1), default=None)
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="A remote DATASET (or recipe source): the block cache directory [default: $SHARDKIT_REMOTE_CACHE_DIR, else "
                   "~/.cache/shardkit/remote].")
@click.option("--cache-limit", type=ByteSize(), default=None,
              help="A remote DATASET (or recipe source): the cache's size limit, e.g. 20GiB [default: $SHARDKIT_REMOTE_CACHE_LIMIT, "
                   "else 16GiB].")
@click.option("--packing", type=click.Choice(["window", "first_fit", "best_fit"]), default="window",
              show_default=True, help="Rows: windows over the token stream, or whole documents packed "
                                      "(a recipe sets it per phase).")
@click.option("--packing-cache-dir", type=click.Path(file_okay=False), default=None,
              help="Where packing tables are kept [default: $SHARDKIT_PACK_CACHE_DIR, else ~/.cache/shardkit/packing].")
@click.option("--packing-store", is_flag=True,
              help="Packed rows: read them from a store of the rows materialised beside their table (built once; "
                   "about 2.5× the tokens on disk for uint16 data, fields included: docs/loader.md).")
@click.option("--balance-ranks", is_flag=True, help="Packed rows: deal each global batch to ranks by attention "
                                                     "cost (Σ len²).")
@click.option("--micro-batch-size", type=click.IntRange(min=1), default=None,
              help="Rows per item (a rank's global-batch share in micro-batches); with --order megatron, "
                   "Megatron's --micro-batch-size (its sampler's rank slicing).")
@click.option("--order", "order", type=click.Choice(["shardkit", "megatron"]), default="shardkit", show_default=True,
              help="megatron: megatron-core's GPTDataset/BlendedDataset sample order over the DATASET's shards "
                   "(docs/megatron.md).")
@click.option("--megatron-samples", type=click.IntRange(min=1), default=None,
              help="--order megatron: the split's sample count (Megatron's --train-samples).")
@click.option("--megatron-data-path", default=None,
              help="--order megatron: 'W1 SHARD1 W2 SHARD2 ...' as Megatron's --data-path, shards of DATASET "
                   "[default: every shard, one prefix needs no weight].")
@click.option("--megatron-split", default="1,0,0", show_default=True, help="--order megatron: Megatron's --split.")
@click.option("--megatron-split-name", type=click.Choice(["train", "valid", "test"]), default="train",
              show_default=True, help="--order megatron: which split of --megatron-split to stream.")
@click.option("--megatron-cache-dir", type=click.Path(file_okay=False), default=None,
              help="--order megatron: where the index arrays are kept (Megatron's --data-cache-path).")
@click.option("--consumed-samples", type=click.IntRange(min=0), default=None,
              help="--order megatron: continue from a Megatron checkpoint's consumed_train_samples.")
@storage_option_flag
@skip_option
@verify_options
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG of the accounting over the steps streamed: tokens per source delivered vs the "
                   "recipe, and the error (needs matplotlib: the 'plot' extra).")
@json_option
@click.pass_context
def stream_cmd(ctx, dataset, recipe, strict, seq_len, batch_size, ramp, seed, shuffle, steps, start_step, rank,
               world_size, workers, max_epochs, cache_dir, cache_limit, packing, packing_cache_dir, packing_store,
               balance_ranks, micro_batch_size, order, megatron_samples, megatron_data_path, megatron_split, megatron_split_name,
               megatron_cache_dir, consumed_samples, storage_options, skip, verify_on_read, on_corrupt, plot, as_json):
    """Run the loader on DATASET (or a --recipe mixture) without a trainer; print tokens/s and a digest.

    DATASET is a dataset directory or a remote URL (s3://, gs://, az://, ...) streamed through a bounded
    local block cache. With --order megatron, DATASET may be left out when --megatron-data-path names its
    prefixes as paths (DATASET_DIR/SHARD, as Megatron's --data-path does): the blend then reads the shards
    of every dataset it names. A recipe with `order: megatron` streams its Megatron blend the same way.
    """
    if dataset is not None and recipe is not None:
        raise click.UsageError("give either a DATASET directory or URL, or --recipe FILE (not both)")
    if plot is not None and not plot.lower().endswith(".png"):
        raise click.UsageError(f"--plot {plot}: write a .png file")
    remote = dataset is not None and check_dataset_arg(dataset, cache_dir, cache_limit, storage_options)
    read = {"rank": rank, "world_size": world_size, "cache_dir": cache_dir, "cache_limit": cache_limit,
            "storage_options": storage_options, "skip": skip, "verify_on_read": verify_on_read,
            "on_corrupt": on_corrupt}
    if packing_store:
        read["packing_store"] = True
    if recipe is not None:
        given = [n for n in _LOADER_ONLY if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE]
        if given:
            flag = "--" + {"batch_size": "batch"}.get(given[0], given[0]).replace("_", "-")
            raise click.UsageError(f"{flag} does not apply with --recipe: the recipe sets it")
        parsed = _read_recipe(recipe, strict)
        if isinstance(parsed, Recipe):
            megatron_flags(ctx, "shardkit", consumed_samples, start_step)
            _stream_recipe(recipe, strict=strict, steps=steps, start_step=start_step, workers=workers,
                           as_json=as_json, packing_cache_dir=packing_cache_dir, balance_ranks=balance_ranks,
                           plot=plot, **read)
            return
        # order: megatron — one Megatron blend, streamed by the dataset loader
        megatron_flags(ctx, "megatron", consumed_samples, start_step, allowed=("consumed_samples",))
        if read["skip"] and parsed.skip:
            raise click.UsageError("--skip: the recipe has its own skip list; give the ranges in one place")
        if not read["skip"]:
            del read["skip"]
        # the recipe as parsed above (read once); its paths are relative to its file
        loader = Loader.from_recipe(parsed, base_dir=Path(recipe).resolve().parent, micro_batch_size=micro_batch_size,
                                    **read)
        source = {"recipe": recipe, "fingerprint": parsed.fingerprint()}
    else:
        if strict:
            raise click.UsageError("--strict applies to --recipe only")
        megatron = _megatron_options(ctx, order, megatron_samples, megatron_data_path, megatron_split,
                                     megatron_split_name, megatron_cache_dir, consumed_samples, start_step)
        data = dataset if dataset is not None else _prefix_datasets(megatron)
        source = {"dataset": data}
        loader = Loader(data, seq_len=seq_len, seed=seed, batch_schedule=ramp or batch_size, shuffle=shuffle,
                        max_epochs=max_epochs, packing=packing, packing_cache_dir=packing_cache_dir,
                        balance_ranks=balance_ranks, micro_batch_size=micro_batch_size, order=order,
                        megatron=megatron, **read)
    if start_step:
        loader.load_state_dict(loader.state_at(start_step))
    if consumed_samples:
        loader.resume_from_megatron(consumed_samples)
    packed = packing_report(loader, world_size=world_size, batches=min(steps, 256)) if packing != "window" \
        else None
    report = _run(loader, steps, workers, as_json)
    out = {**source, **_common(report, rank, world_size, workers),
           "state_after": loader.state_at(report.last_batch + 1) if report.batches else None}
    if plot is not None:
        write_accounting_plot(loader, report.last_batch + 1 if report.batches else loader.step, plot)
        out["plot"] = plot
    if packed is not None:
        out["packing"] = packed
    if remote:
        out["cache"] = loader.dataset.stats()
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    _echo_summary(report)
    m = report.metrics
    if workers > 0:
        click.echo(f"  reads: done in the {workers} worker processes (read metrics are per process)")
    else:
        click.echo(f"  reads: {m['bytes_copied'] / 2**20:.1f} MiB copied, {m['epoch_distinct_blocks']} distinct "
                   f"shuffle blocks this epoch, {m['groups_entered']} groups entered, "
                   f"{m['bytes_prefetched'] / 2**20:.0f} MiB hinted ahead")
    if packed is not None:
        click.echo(packing_lines(packed))
    if remote and workers == 0:  # (with workers, each worker process has its own downloads)
        c = loader.dataset.stats()
        click.echo(f"  cache: {c['bytes_downloaded'] / 2**20:.1f} MiB downloaded in {c['blocks_downloaded']} blocks, "
                   f"{c['blocks_verified']} cached blocks re-verified, waited {c['wait_seconds']:.2f} s")
    _echo_integrity(m, workers)
    click.echo(f"  digest {report.digest}")


def _read_recipe(recipe, strict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecipeWarning)  # MixtureLoader reads it again and reports them
        return read_recipe(recipe, strict=strict)


_MEGATRON_FLAGS = ("megatron_samples", "megatron_data_path", "megatron_split", "megatron_split_name",
                   "megatron_cache_dir", "consumed_samples")


def megatron_flags(ctx, order, consumed, start_step, *, allowed=_MEGATRON_FLAGS) -> None:
    """Usage errors for --megatron-* flags given where they do not apply."""
    given = [n for n in _MEGATRON_FLAGS if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE]
    if order != "megatron" and given:
        raise click.UsageError(f"--{given[0].replace('_', '-')} applies to --order megatron only")
    refused = [n for n in given if n not in allowed]
    if refused:
        raise click.UsageError(f"--{refused[0].replace('_', '-')} does not apply with --recipe: the recipe sets it")
    if consumed is not None and start_step:
        raise click.UsageError("give --consumed-samples or --start-step, not both")


def _prefix_datasets(megatron) -> list[str]:
    """Without DATASET, the datasets of --megatron-data-path's prefixes (Megatron's `DIR/NAME` paths): each
    prefix's directory, or the prefix itself when it is a dataset directory (of one shard)."""
    if megatron is None:
        raise click.UsageError("give either a DATASET directory or URL, or --recipe FILE")
    prefixes = megatron.get("prefixes") or []
    if not prefixes or not all("/" in p for p in prefixes):
        raise click.UsageError("give a DATASET, or --megatron-data-path with the prefixes as paths "
                               "(DATASET_DIR/SHARD, as in Megatron's --data-path)")
    out: list[str] = []
    for p in prefixes:
        where = p.rstrip("/") if (Path(p) / MANIFEST_NAME).is_file() else str(Path(p).parent)
        if where not in out:
            out.append(where)
    return out


def _megatron_options(ctx, order, samples, data_path, split, split_name, cache_dir, consumed, start_step
                      ) -> dict | None:
    """The loader's megatron= options from the --megatron-* flags (a usage error where they do not apply)."""
    megatron_flags(ctx, order, consumed, start_step)
    if order != "megatron":
        return None
    if samples is None:
        raise click.UsageError("--order megatron needs --megatron-samples (Megatron's --train-samples)")
    out: dict = {"num_samples": samples, "split": split, "split_name": split_name, "path_to_cache": cache_dir}
    if data_path is not None:
        try:
            weights, prefixes = split_data_path(data_path.split())
        except ConfigError:
            prefixes = []
        if not prefixes:
            raise click.UsageError("--megatron-data-path: expected 'WEIGHT SHARD WEIGHT SHARD ...' or "
                                   "'SHARD SHARD ...'")
        out["prefixes"], out["weights"] = prefixes, weights if len(prefixes) > 1 else None
    return out


def _run(loader, steps, workers, as_json) -> StreamReport:
    status = StatusLine(enabled=not as_json)
    try:
        return stream(loader, steps=steps, workers=workers,
                      progress=lambda b, t, s: status.update(f"streaming {b} batches, {human_count(t / max(s, 1e-9))} tok/s"))
    finally:
        status.close()


def _common(report: StreamReport, rank, world_size, workers) -> dict:
    return {"batches": report.batches, "samples": report.samples, "tokens": report.tokens,
            "seconds": round(report.seconds, 4), "tokens_per_s": round(report.tokens_per_s),
            "first_batch": report.first_batch, "last_batch": report.last_batch, "digest": report.digest,
            "rank": rank, "world_size": world_size, "workers": workers, "metrics": report.metrics}


def _echo_summary(report: StreamReport) -> None:
    click.echo(f"streamed {report.batches} batches ({report.first_batch}..{report.last_batch}), "
               f"{human_count(report.samples)} samples, {human_count(report.tokens)} tokens in "
               f"{report.seconds:.2f}s: {human_count(report.tokens_per_s)} tok/s")


def packing_lines(p: dict) -> str:
    """The packing report: rows, padding, documents split, and the per-rank attention-cost balance."""
    lines = [f"  packing {p['strategy']} at seq_len {p['seq_len']:,}: {p['rows']:,} rows per epoch, "
             f"{100 * p['padding_fraction']:.2f}% padding, {p['documents_split']:,} of {p['documents']:,} "
             f"documents split"]
    b = p.get("balance")
    if b is not None and b["world_size"] > 1:
        lines.append(f"  per-rank attention cost (Σ len², {b['batches']} batches, world size {b['world_size']}): "
                     f"max/mean {b['max_over_mean']:.3f} (worst {b['max_over_mean_worst']:.3f}); balanced "
                     f"{b['balanced_max_over_mean']:.3f} (worst {b['balanced_max_over_mean_worst']:.3f})")
    return "\n".join(lines)


def _stream_recipe(recipe, *, strict, steps, start_step, rank, world_size, workers, as_json, cache_dir=None,
                   cache_limit=None, storage_options=None, packing_cache_dir=None, balance_ranks=False,
                   skip=(), verify_on_read=False, on_corrupt="raise", plot=None, packing_store=False) -> None:
    """A mixture recipe: the stream, then what each source gave against the recipe."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RecipeWarning)
        loader = MixtureLoader(recipe, strict=strict, rank=rank, world_size=world_size, cache_dir=cache_dir,
                               cache_limit=cache_limit, storage_options=storage_options,  # remote sources
                               packing_cache_dir=packing_cache_dir, balance_ranks=balance_ranks, skip=skip,
                               verify_on_read=verify_on_read, on_corrupt=on_corrupt, packing_store=packing_store)
        if start_step:
            loader.load_state_dict(loader.state_at(start_step))
        report = _run(loader, steps, workers, as_json)
    notes = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, RecipeWarning)))
    position = report.last_batch + 1 if report.batches else loader.step
    mixture = loader.metrics.to_json(batch=position)
    ended = position >= loader.num_batches()
    out = {"recipe": recipe, "fingerprint": loader.fingerprint, **_common(report, rank, world_size, workers),
           "mixture": mixture, "ended": ended, "end_reason": loader.end_reason if ended else None,
           "warnings": notes, "state_after": loader.state_at(position), "accounting": loader.accounting(position)}
    if plot is not None:
        write_accounting_plot(loader, position, plot)
        out["plot"] = plot
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    for note in notes:
        click.echo(f"warning: {note}", err=True)
    _echo_summary(report)
    phases = loader.plan.phases
    where = (f"phase {mixture['phase'] + 1}/{len(phases)} {mixture['phase_name']!r}, batch "
             f"{mixture['phase_batch']:,} of {mixture['phase_batches']:,}, seq_len {mixture['seq_len']:,}"
             if mixture["phase"] is not None else "the end of the recipe")
    click.echo(f"  recipe {loader.fingerprint[:12]} ({len(phases)} phases, {loader.num_batches():,} batches); "
               f"next batch {position:,}: {where}")
    if ended:
        click.echo(f"  run ended: {loader.end_reason}")
    click.echo(_table(mixture))
    click.echo("  accounting (all ranks) against the recipe:")
    click.echo(accounting_table(out["accounting"]))
    if plot is not None:
        click.echo(f"  accounting plot: {plot}")
    click.echo(f"  reads: {mixture['bytes_copied'] / 2**20:.1f} MiB copied, {mixture['groups_entered']} groups "
               f"entered, {mixture['bytes_prefetched'] / 2**20:.0f} MiB hinted ahead")
    _echo_integrity(report.metrics, workers)
    click.echo(f"  digest {report.digest}")


def _echo_integrity(m: dict, workers: int) -> None:
    """What verify_on_read / on_corrupt did in this process (with workers: in the main process only)."""
    got = m.get("integrity")
    if got is None:
        return
    where = " (this process; each worker verifies its own reads)" if workers > 0 else ""
    click.echo(f"  integrity{where}: {got['blocks_verified']} checksum blocks verified "
               f"({got['bytes_verified'] / 2**20:.0f} MiB), {got['corrupt_blocks']} damaged, "
               f"{got['rows_replaced']} rows replaced (on_corrupt={got['policy']})")
    for ev in got["events"][:10]:
        click.echo(f"    step {ev['step']} rank {ev['rank']}: {ev['rows_replaced']} row(s) of {ev['source']!r} "
                   f"replaced (shard {ev['shard']}, block {ev['block']}, bytes {ev['byte_range'][0]:,}–"
                   f"{ev['byte_range'][1]:,})")
    if len(got["events"]) > 10:
        click.echo(f"    … {len(got['events']) - 10} more events (--json lists them)")


def _table(m: dict) -> str:
    """Per source: weight in the current phase, consumed samples/tokens (all ranks), share, epoch."""
    total = max(1, m["tokens"])
    rows = [("source", "weight", "samples", "tokens", "share", "epoch", "epochs")]
    for name, s in m["sources"].items():
        rows.append((name, f"{s['weight']:.4g}", human_count(s["samples"]), human_count(s["tokens"]),
                     f"{100 * s['tokens'] / total:.1f}%", f"{s['epoch_fraction']:.3f}", str(s["epochs"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                                      enumerate(zip(r, widths))) for r in rows)
