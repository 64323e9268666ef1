"""`shardkit decompress`: a plain (Megatron-readable) copy of a dataset with compressed shards."""

from __future__ import annotations

import json
import time

import click

from shardkit.units import human_bytes
from shardkit.writer.decompress import decompress_dataset

from .options import json_option
from .progress import StatusLine, format_duration

__all__ = ["decompress_cmd"]


@click.command("decompress")
@click.argument("dataset", type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False),
              help="New or empty directory for the plain dataset.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Threads decompressing frames (default: one per core).")
@click.option("-q", "--quiet", is_flag=True, help="No progress line.")
@json_option
def decompress_cmd(dataset, output, jobs, quiet, as_json):
    """Write DATASET with every NAME.bin.zst decompressed to a plain NAME.bin into OUTPUT.

    Every frame and block is checked on the way. The result is what `shardkit pack` without
    --compression writes for the same job: same files, same fingerprint, readable by Megatron-LM.
    """
    status = StatusLine(enabled=not quiet and not as_json)
    t0 = time.monotonic()
    try:
        m = decompress_dataset(dataset, output, threads=jobs,
                               progress=lambda done, total: status.update(f"decompressing: {done:,}/{total:,} shards"))
    finally:
        status.close()
    seconds = time.monotonic() - t0
    size = sum(s.bin_bytes for s in m.shards)
    if as_json:
        click.echo(json.dumps({"path": output, "fingerprint": m.fingerprint, "shards": len(m.shards),
                               "bytes": size, "seconds": round(seconds, 3)}, indent=2))
        return
    click.echo(f"decompressed {len(m.shards):,} shard(s), {human_bytes(size)} of tokens → {output} in "
               f"{format_duration(seconds)}\n  fingerprint {m.fingerprint[:16]}")
