"""`shardkit demo`: the embedded default job, end to end, on the standard library's own text."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
import numpy as np
import xxhash

from shardkit import open_dataset
from shardkit.demo import build_stdlib_corpus
from shardkit.loader import Loader
from shardkit.pack import PackConfig, TokenizeOptions, pack
from shardkit.stream import stream
from shardkit.units import human_bytes, human_count
from shardkit.verify import verify_dataset
from shardkit.writer import ShardLimits

from .pack_cmd import summary_text
from .progress import StatusLine, pack_status


@click.command("demo")
@click.option("-o", "--output", default="demo-out", show_default=True, type=click.Path(file_okay=False),
              help="Working directory (corpus/ and dataset/ are written inside).")
@click.option("-w", "--workers", type=click.IntRange(min=0), default=0, help="Tokenizer processes (0 = chosen from the cores, as pack does).")
def demo_cmd(output, workers):
    """Build a corpus from the Python standard library, pack it with the bytes tokenizer, open and check it."""
    root = Path(output)
    t0 = time.monotonic()
    files = build_stdlib_corpus(root / "corpus")
    click.echo(f"corpus: {', '.join(f'{f.name} ({human_bytes(f.stat().st_size)})' for f in files)} "
               f"in {time.monotonic() - t0:.1f}s")
    config = PackConfig(inputs=tuple(str(f) for f in files), output=str(root / "dataset"),
                        tokenize=TokenizeOptions(tokenizer="bytes"),
                        limits=ShardLimits(max_bytes=8 << 20, checksum_block_size=1 << 20),
                        workers=workers, overwrite=True)
    status = StatusLine()
    try:
        result = pack(config, progress=lambda p: status.update(pack_status(p)))
    finally:
        status.close()
    click.echo(summary_text(result))
    ds = open_dataset(result.path)
    _check(ds)
    click.echo(f"opened {ds!r}")
    first = ds.doc(0)
    text = bytes(np.asarray(first[:-1], dtype=np.uint8)).decode("utf-8", "replace")
    click.echo(f"document 0: {first.size} tokens, starts {text[:60]!r}")
    def make() -> Loader:
        return Loader(ds, seq_len=1024, seed=0, batch_schedule=8, shuffle="block")

    report = stream(make(), steps=200)
    click.echo(f"streamed {report.batches} batches of 8 × 1024 tokens (block shuffle) at "
               f"{human_count(report.tokens_per_s)} tok/s; digest {report.digest[:16]}")
    full = _batch_digests(make(), 200)
    first = make()
    _batch_digests(first, 100)
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))  # through JSON, as in a checkpoint
    if _batch_digests(resumed, 100) != full[100:]:
        raise click.ClickException("resume check failed: batches after the resume differ")
    click.echo("resume check: a loader restored from the state saved at batch 100 delivers exactly batches 100..199")
    click.echo(f"demo done in {time.monotonic() - t0:.1f}s: {human_count(ds.num_tokens)} tokens in "
               f"{ds.num_shards} shards at {result.path}")


def _check(ds) -> None:
    """The full verification pack's users run before spending GPU hours (`shardkit verify --deep`)."""
    report = verify_dataset(ds.path, mode="deep")
    if not report.ok:
        raise click.ClickException(f"verify found {len(report.problems)} problem(s): "
                                   f"{report.problems[0].detail if report.problems else report.verdict.value}")
    click.echo(f"verified (--deep): every block checksum of {ds.num_shards} shards, every index, every token id "
               f"< vocab size, EOS at all {ds.num_docs:,} document ends")

def _batch_digests(loader: Loader, n: int) -> list[str]:
    return [xxhash.xxh3_64_hexdigest(np.ascontiguousarray(b["input_ids"]).tobytes())
            for _, b in zip(range(n), loader)]
