"""`shardkit explain`: what a step's rows held (source, shard, documents, token ranges, text), or — with
`--doc` — the steps at which a document is seen in an epoch. Computed from the order, O(1) in the step.

The loader configuration must be the run's (dataset flags as for `shardkit stream`, or `--recipe`); the
world size and micro-batch size say how a global batch's rows are dealt to ranks.
"""

from __future__ import annotations

import json

import click
from click.core import ParameterSource

from shardkit.engine.explain import PREVIEW_TOKENS, Explanation, document_steps, explain
from shardkit.loader import Loader, MixtureLoader

from .options import check_dataset_arg, json_option, remote_dataset_options, skip_option
from .stream_cmd import _LOADER_ONLY, _ramp


@click.command("explain")
@click.argument("dataset", required=False)
@click.option("--recipe", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Explain a step of a mixture recipe (YAML, TOML or JSON) instead of one DATASET.")
@click.option("--step", type=click.IntRange(min=0), default=None, help="The global batch to explain.")
@click.option("--rank", type=click.IntRange(min=0), default=None, help="Only this rank's rows (default: all).")
@click.option("--micro", type=click.IntRange(min=0), default=None, help="Only this micro-batch of the rank's rows.")
@click.option("--row", type=click.IntRange(min=0), default=None,
              help="Only this row of the rank's item (of micro-batch --micro, with micro-batches).")
@click.option("--doc", type=click.IntRange(min=0), default=None,
              help="Instead of --step: list the steps at which document DOC (of --source) is seen.")
@click.option("--source", default=None, help="With --doc: the recipe source the document belongs to.")
@click.option("--epoch", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --doc: the epoch of the source's order to look in.")
@click.option("--seq-len", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--batch", "batch_size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Global batch size (constant schedule).")
@click.option("--ramp", callback=_ramp, default=None, help="Megatron-style ramp START,INCREMENT,RAMP_SAMPLES,FINAL.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--shuffle", type=click.Choice(["none", "block", "full"]), default="block", show_default=True)
@click.option("--max-epochs", type=click.IntRange(min=1), default=None)
@click.option("--world-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--micro-batch-size", type=click.IntRange(min=1), default=None)
@click.option("--preview-tokens", type=click.IntRange(min=0), default=PREVIEW_TOKENS, show_default=True,
              help="Decode this many tokens of each row (0: no text).")
@click.option("--tokenizer", default=None, metavar="SPEC",
              help="Tokenizer to decode with (default: the recorded one, only if its file is in the dataset).")
@skip_option
@remote_dataset_options
@json_option
@click.pass_context
def explain_cmd(ctx, dataset, recipe, step, rank, micro, row, doc, source, epoch, seq_len, batch_size, ramp, seed,
                shuffle, max_epochs, world_size, micro_batch_size, preview_tokens, tokenizer, skip, cache_dir,
                cache_limit, storage_options, as_json):
    """Where each row of global batch --step came from: source, shard, documents, token ranges, text.

    With --doc DOC instead: the steps (and rank, row) at which document DOC is seen in --epoch.
    """
    if (dataset is None) == (recipe is None):
        raise click.UsageError("give either a DATASET directory or URL, or --recipe FILE (not both)")
    if (step is None) == (doc is None):
        raise click.UsageError("give either --step (explain a batch) or --doc (find a document's steps)")
    if doc is not None and any(v is not None for v in (rank, micro, row)):
        raise click.UsageError("--rank, --micro and --row apply to --step only")
    if recipe is not None:
        given = [n for n in _LOADER_ONLY if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE]
        if given:
            flag = "--" + {"batch_size": "batch"}.get(given[0], given[0]).replace("_", "-")
            raise click.UsageError(f"{flag} does not apply with --recipe: the recipe sets it")
        loader = MixtureLoader(recipe, world_size=world_size, rank=0, micro_batch_size=micro_batch_size,
                               readahead=False, skip=skip, cache_dir=cache_dir, cache_limit=cache_limit,
                               storage_options=storage_options)
    else:
        check_dataset_arg(dataset, cache_dir, cache_limit, storage_options)
        if source is not None:
            raise click.UsageError("--source applies to --recipe only")
        loader = Loader(dataset, seq_len=seq_len, seed=seed, batch_schedule=ramp or batch_size, shuffle=shuffle,
                        max_epochs=max_epochs, world_size=world_size, rank=0, micro_batch_size=micro_batch_size,
                        readahead=False, skip=skip, cache_dir=cache_dir, cache_limit=cache_limit,
                        storage_options=storage_options)
    with loader:
        if doc is not None:
            seen = document_steps(loader, doc, source=source, epoch=epoch)
            if as_json:
                click.echo(json.dumps({"doc": doc, "source": source, "epoch": epoch,
                                       "sightings": [s.to_json() for s in seen]}, indent=2))
                return
            where = f" of {source}" if source else ""
            click.echo(f"document {doc:,}{where}, epoch {epoch}: seen at {len(seen)} step(s)")
            for s in seen:
                click.echo(f"  step {s.step:,}{' (skipped)' if s.skipped else ''}  rank {s.rank}  micro {s.micro}  row {s.row}  ({s.phase}, seq_len "
                           f"{s.seq_len}, sample {s.sample_id:,})  document tokens [{s.start:,}, {s.stop:,})")
            return
        got = explain(loader, step, rank, row, micro=micro, decode=preview_tokens > 0, tokenizer=tokenizer,
                      preview_tokens=preview_tokens)
    if as_json:
        click.echo(json.dumps(got.to_json(), indent=2, ensure_ascii=False))
        return
    _echo(got)


def _echo(got: Explanation) -> None:
    micro = f", micro-batches of {got.micro_batch_size}" if got.micro_batch_size else ""
    click.echo(f"step {got.step:,}: phase {got.phase!r}, seq_len {got.seq_len:,}, global batch "
               f"{got.global_batch_size} over world size {got.world_size}{micro}")
    if got.skipped:
        click.echo(f"SKIPPED: in skip range [{got.skipped[0]:,}, {got.skipped[1]:,}]; the loader never delivers "
                   "this step (below: the rows it would have held)")
    for r in got.rows:
        click.echo(f"rank {r.rank} micro {r.micro} row {r.row}: {r.source}, sample {r.sample_id:,} (epoch {r.epoch}, "
                   f"position {r.position:,}), shard {r.shard} token {r.shard_token:,}")
        for p in r.docs:
            click.echo(f"    doc {p.doc:,} ({p.shard} #{p.doc_in_shard:,}) tokens [{p.start:,}, {p.stop:,}) "
                       f"-> row [{p.at:,}, {p.at + p.stop - p.start:,})")
        if r.preview is not None:
            click.echo(f"    text: {json.dumps(r.preview, ensure_ascii=False)}")
    for n in got.notes:
        click.echo(f"note: {n}")
