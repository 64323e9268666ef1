"""`shardkit merge`: one dataset over the parts of a split pack, without copying token data."""

from __future__ import annotations

import json

import click

from shardkit.pack.merge import merge_parts
from shardkit.units import human_bytes, human_count

from .options import json_option


@click.command("merge")
@click.argument("parts", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Dataset directory to write.")
@click.option("--overwrite", is_flag=True, help="Replace a dataset already in OUTPUT.")
@json_option
def merge_cmd(parts, output, overwrite, as_json):
    """Merge PARTS (the outputs of `shardkit pack --num-tasks N --task-id I`, all N, any order) into OUTPUT.

    Shard files are hard-linked, never copied (parts and OUTPUT must share a filesystem); the manifest
    lists the parts' shards in task order and is written last. Merging the same parts again gives the
    same fingerprint; a merge that stopped part-way finishes when run again.
    """
    r = merge_parts(parts, output, overwrite=overwrite)
    m = r.manifest
    if as_json:
        click.echo(json.dumps({"path": str(r.path), "fingerprint": r.fingerprint, "parts": r.parts,
                               "shards": len(m.shards), "docs": m.num_docs, "tokens": m.num_tokens,
                               "linked_files": r.linked_files, "already_merged": r.already_merged}, indent=2))
        return
    state = "already merged, nothing to do" if r.already_merged else f"{r.linked_files} file(s) hard-linked"
    click.echo(f"merged {r.parts} part(s) → {r.path} ({state})\n"
               f"  {human_count(m.num_docs)} docs, {human_count(m.num_tokens)} tokens ({m.dtype}) in "
               f"{len(m.shards)} shard(s), {human_bytes(sum(s.bin_bytes for s in m.shards))}\n"
               f"  fingerprint {r.fingerprint[:16]}")
