"""`shardkit plan`: before a run, what each node will read from storage, step by step (shardkit.planner)."""

from __future__ import annotations

import json

import click

from shardkit.loader import MixtureLoader
from shardkit.planner import Cluster, plan_loader
from shardkit.planner.report import render_plan, write_report

from .options import ByteSize, json_option

__all__ = ["plan_cmd"]


@click.command("plan")
@click.option("--recipe", type=click.Path(exists=True, dir_okay=False), required=True,
              help="The run's recipe (YAML, TOML or JSON); one dataset is a recipe of one source.")
@click.option("--nodes", type=click.IntRange(min=1), required=True)
@click.option("--ranks-per-node", type=click.IntRange(min=1), required=True)
@click.option("--page-cache", type=ByteSize(), required=True, metavar="SIZE",
              help="Page cache each node can give the data, e.g. 200GiB.")
@click.option("--storage-gbps", type=click.FloatRange(min=0, min_open=True), default=None,
              help="The storage's aggregate bandwidth, gigabits per second: steps that need more are named.")
@click.option("--step-seconds", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds per optimizer step (for bandwidths).")
@click.option("--gpu-tokens-per-second", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Or: each rank's training throughput; the step time follows the batch ramp and seq_len.")
@click.option("--points", type=click.IntRange(min=2, max=100_000), default=200, show_default=True,
              help="Intervals the run is cut into (plus every phase and batch-size change).")
@click.option("--report", "report", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write FILE.html (table and plot) or FILE.png (needs shardkit[plot]).")
@json_option
def plan_cmd(recipe, nodes, ranks_per_node, page_cache, storage_gbps, step_seconds, gpu_tokens_per_second,
             points, report, as_json):
    """Predict what each node reads from storage over the whole run: bytes per step, the page-cache working
    set and hit rate, the storage bandwidth the cluster needs, and where a node's working set stops fitting.

    The model and its validation on real reads are in docs/planner.md.
    """
    if step_seconds is not None and gpu_tokens_per_second is not None:
        raise click.UsageError("give --step-seconds or --gpu-tokens-per-second, not both")
    cluster = Cluster(nodes=nodes, ranks_per_node=ranks_per_node, page_cache_bytes=page_cache,
                      storage_gbps=storage_gbps, step_seconds=step_seconds,
                      gpu_tokens_per_second=gpu_tokens_per_second)
    with MixtureLoader(recipe, world_size=cluster.world_size, rank=0, readahead=False) as loader:
        plan = plan_loader(loader, cluster, points=points)
    if report:
        write_report(plan, report)
    if as_json:
        click.echo(json.dumps(plan.to_json(), indent=2))
        return
    click.echo(render_plan(plan))
    if report:
        click.echo(f"report written to {report}")
