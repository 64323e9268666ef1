"""`shardkit adopt`: a manifest around existing Megatron `.bin/.idx` data, without copying tokens."""

from __future__ import annotations

import json

import click

from shardkit.adopt import adopt
from shardkit.tokenizers import load_tokenizer
from shardkit.units import human_count

from .options import ByteSize, json_option


@click.command("adopt")
@click.argument("prefixes", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Dataset directory.")
@click.option("-t", "--tokenizer", default=None, help="Tokenizer spec to record (enables deep verify and decode).")
@click.option("--checksum-block-size", type=ByteSize(), default="16MiB", show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace an existing manifest in OUTPUT.")
@json_option
def adopt_cmd(prefixes, output, tokenizer, checksum_block_size, overwrite, as_json):
    """Adopt Megatron-LM PREFIX.bin/PREFIX.idx pairs as a shardkit dataset at OUTPUT (hard links, no copy)."""
    spec = None
    if tokenizer:
        spec = {k: v for k, v in load_tokenizer(tokenizer).spec.to_json().items() if k != "backend"}
    r = adopt(prefixes, output, tokenizer=spec, checksum_block_size=checksum_block_size, overwrite=overwrite)
    m = r.manifest
    if as_json:
        click.echo(json.dumps({"path": str(r.path), "fingerprint": m.fingerprint, "shards": len(m.shards),
                               "docs": m.num_docs, "tokens": m.num_tokens, "dtype": m.dtype,
                               "linked_files": r.linked, "in_place_files": r.in_place}, indent=2))
    else:
        click.echo(f"adopted {len(m.shards)} shard(s): {human_count(m.num_docs)} sequences, "
                   f"{human_count(m.num_tokens)} tokens ({m.dtype}) → {r.path} "
                   f"({r.linked} file(s) hard-linked, {r.in_place} in place); fingerprint {m.fingerprint[:16]}")
