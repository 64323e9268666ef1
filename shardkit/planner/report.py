"""An I/O plan as text, as a PNG (tokens per source, batch size, seq_len, storage GB/s per node over the
steps) and as an HTML page holding both (the PNG inline, so the file travels alone)."""

from __future__ import annotations

import base64
import html
import io
import os
from pathlib import Path

from ..errors import ConfigError, MissingDependencyError
from ..units import human_bytes, human_count
from .model import IOPlan

__all__ = ["plot_plan", "render_plan", "write_report"]


def render_plan(plan: IOPlan, *, rows: int = 24) -> str:
    """A table of about `rows` lines over the run, and what to know first."""
    c = plan.cluster
    lines = [f"{c.nodes} nodes × {c.ranks_per_node} ranks (world size {c.world_size}); page cache "
             f"{human_bytes(c.page_cache_bytes)} per node"
             + (f"; storage {c.storage_gbps:g} Gb/s" if c.storage_gbps else "")]
    if not plan.intervals:
        return "\n".join(lines + ["the stream is empty: nothing to read"])
    lines.append(f"each node reads {human_bytes(plan.node_bytes)} from storage over "
                 f"{human_count(plan.intervals[-1].end)} steps; the cluster {human_bytes(plan.node_bytes * c.nodes)}")
    over = plan.first_overflow
    lines.append("the working set fits every node's page cache throughout" if over is None else
                 f"the working set stops fitting at step {over.first:,} (phase {over.phase_name!r}, "
                 f"{human_bytes(over.working_set)} > {human_bytes(c.page_cache_bytes)}): pages read ahead "
                 f"are evicted before use and read again (up to 2× the bytes)")
    short = [i for i in plan.intervals if i.storage_ok is False]
    if short:
        lines.append(f"storage is short from step {short[0].first:,}: the cluster needs "
                     f"{short[0].cluster_gbytes_per_s * 8:.1f} Gb/s there ({c.storage_gbps:g} Gb/s available)")
    lines.append("")
    head = f"{'steps':>23} {'phase':<12} {'seq':>6} {'batch':>6} {'node/step':>10} {'working set':>11} {'hit':>5}"
    if any(i.step_seconds for i in plan.intervals):
        head += f" {'node /s':>10} {'cluster /s':>11}"
    lines.append(head)
    step = max(1, len(plan.intervals) // rows)
    for i in plan.intervals[::step]:
        line = (f"{i.first:>11,}–{i.end - 1:<11,} {i.phase_name[:12]:<12} {i.seq_len:>6} {i.batch_size:>6} "
                f"{human_bytes(i.node_bytes / i.steps):>10} {human_bytes(i.working_set):>11} {i.hit_rate:>5.2f}")
        if i.node_gbytes_per_s is not None:
            line += f" {human_bytes(i.node_gbytes_per_s * 1e9):>10} {human_bytes(i.cluster_gbytes_per_s * 1e9):>11}"
        lines.append(line)
    return "\n".join(lines)


def plot_plan(plan: IOPlan) -> bytes:
    """The PNG: tokens per source, batch size and seq_len, storage GB/s per node (or bytes per step)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("matplotlib", extra="plot", purpose="plan --report") from None
    fig = Figure(figsize=(11, 9), layout="constrained")
    ax_t, ax_b, ax_r = fig.subplots(3, 1, sharex=True)
    steps = [i.first for i in plan.intervals] + ([plan.intervals[-1].end] if plan.intervals else [])
    names = sorted({n for i in plan.intervals for n in i.tokens})
    for n in names:
        ax_t.stairs([i.tokens.get(n, 0) / i.steps for i in plan.intervals], steps, label=n)
    ax_t.set_ylabel("tokens per step")
    ax_t.legend(fontsize=8, loc="upper left")
    ax_b.stairs([i.batch_size for i in plan.intervals], steps, color="#4878a8", label="global batch")
    ax_b.set_ylabel("global batch (samples)")
    ax_s = ax_b.twinx()
    ax_s.stairs([i.seq_len for i in plan.intervals], steps, color="#c0504d", label="seq_len")
    ax_s.set_ylabel("seq_len", color="#c0504d")
    if all(i.node_gbytes_per_s is not None for i in plan.intervals):
        ax_r.stairs([i.node_gbytes_per_s for i in plan.intervals], steps, color="#2f6b1f", zorder=2)
        ax_r.set_ylabel("storage GB/s per node")
    else:
        ax_r.stairs([i.node_bytes / i.steps / 1e6 for i in plan.intervals], steps, color="#2f6b1f", zorder=2)
        ax_r.set_ylabel("storage MB per node per step")
    for i in plan.intervals:
        if not i.fits:
            ax_r.axvspan(i.first, i.end, color="#f2c4c4", lw=0, zorder=0)
    ax_r.set_xlabel("step")
    c = plan.cluster
    fig.suptitle(f"I/O plan: {c.nodes} nodes × {c.ranks_per_node} ranks, page cache "
                 f"{human_bytes(c.page_cache_bytes)} per node (red: the working set does not fit)")
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    return out.getvalue()


def write_report(plan: IOPlan, path: str | os.PathLike[str]) -> None:
    """`.png`: the plot; `.html`: the table and the plot inline."""
    p = Path(path)
    if p.suffix.lower() not in (".png", ".html", ".htm"):
        raise ConfigError(f"--report {p.name}: write a .png or an .html file")
    image = plot_plan(plan)
    try:
        if p.suffix.lower() == ".png":
            p.write_bytes(image)
            return
        page = ("<!doctype html><meta charset='utf-8'><title>shardkit I/O plan</title>"
                "<body style='font-family:sans-serif'><h1>shardkit I/O plan</h1>"
                f"<img alt='I/O plan' src='data:image/png;base64,{base64.b64encode(image).decode()}'>"
                f"<pre>{html.escape(render_plan(plan, rows=60))}</pre></body>")
        p.write_text(page, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write {p}: {e.strerror}") from None
