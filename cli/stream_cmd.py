"""`shardkit stream`: dry-run the loader — tokens/s, batches, and a digest of what was delivered."""

from __future__ import annotations

import json

import click

from shardkit.loader import Loader
from shardkit.order import Ramp
from shardkit.stream import stream
from shardkit.units import human_count

from .options import json_option
from .progress import StatusLine


def _ramp(ctx, param, value):
    if value is None:
        return None
    try:
        start, inc, samples, final = (int(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter("expected START,INCREMENT,RAMP_SAMPLES,FINAL, e.g. 16,16,100000,256") from None
    return Ramp(start=start, increment=inc, ramp_samples=samples, final=final)


@click.command("stream")
@click.argument("dataset", type=click.Path(exists=True, file_okay=False))
@click.option("--seq-len", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--batch", "batch_size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Global batch size (constant schedule).")
@click.option("--ramp", callback=_ramp, default=None, help="Megatron-style ramp START,INCREMENT,RAMP_SAMPLES,FINAL.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--shuffle", type=click.Choice(["none", "block", "full"]), default="block", show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=200, show_default=True, help="Items to deliver.")
@click.option("--start-step", type=click.IntRange(min=0), default=0, help="Begin at this global batch (resume).")
@click.option("--rank", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--world-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="torch DataLoader workers (needs torch).")
@click.option("--max-epochs", type=click.IntRange(min=1), default=None)
@json_option
def stream_cmd(dataset, seq_len, batch_size, ramp, seed, shuffle, steps, start_step, rank, world_size, workers,
               max_epochs, as_json):
    """Run the loader on DATASET without a trainer; print tokens/s and a digest of the batches."""
    loader = Loader(dataset, seq_len=seq_len, seed=seed, batch_schedule=ramp or batch_size, shuffle=shuffle,
                    rank=rank, world_size=world_size, max_epochs=max_epochs)
    if start_step:
        loader.load_state_dict(loader.state_at(start_step))
    status = StatusLine(enabled=not as_json)
    try:
        report = stream(loader, steps=steps, workers=workers,
                        progress=lambda b, t, s: status.update(f"streaming {b} batches, {human_count(t / max(s, 1e-9))} tok/s"))
    finally:
        status.close()
    out = {"dataset": dataset, "batches": report.batches, "samples": report.samples, "tokens": report.tokens,
           "seconds": round(report.seconds, 4), "tokens_per_s": round(report.tokens_per_s),
           "first_batch": report.first_batch, "last_batch": report.last_batch, "digest": report.digest,
           "rank": rank, "world_size": world_size, "workers": workers, "metrics": report.metrics,
           "state_after": loader.state_at(report.last_batch + 1) if report.batches else None}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"streamed {report.batches} batches ({report.first_batch}..{report.last_batch}), "
               f"{human_count(report.samples)} samples, {human_count(report.tokens)} tokens in "
               f"{report.seconds:.2f}s: {human_count(report.tokens_per_s)} tok/s")
    m = report.metrics
    click.echo(f"  reads: {m['bytes_copied'] / 2**20:.1f} MiB copied, {m['epoch_distinct_blocks']} distinct "
               f"shuffle blocks this epoch, {m['groups_entered']} groups entered, "
               f"{m['bytes_prefetched'] / 2**20:.0f} MiB hinted ahead")
    click.echo(f"  digest {report.digest}")
