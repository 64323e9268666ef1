"""The run's accounting over steps, as series and as a PNG: tokens per source delivered vs the recipe.

`accounting_series` samples `accounting(loader, b)` at up to `points` steps (each call is O(phases × skips),
nothing is replayed), so the plot of a run of 10⁸ steps costs the same as one of 10³. `plot_accounting`
draws, per source, the tokens delivered and the recipe's expectation (weight × what was delivered, phase by
phase) on one panel and the cumulative error on a second, with phase boundaries marked.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, MissingDependencyError
from .accounting import accounting

__all__ = ["accounting_series", "plot_accounting", "write_accounting_plot"]


def accounting_series(loader: Any, upto: int, points: int = 200) -> dict[str, Any]:
    """{"steps": [...], "sources": {name: {"tokens": [...], "expected_tokens": [...], "error_tokens": [...]}},
    "phase_starts": [(step, name), ...]} for steps 0 … `upto` (at most `points` of them, evenly spaced)."""
    if upto < 0:
        raise ConfigError(f"accounting plot: upto must be ≥ 0, got {upto}")
    steps = np.unique(np.linspace(0, upto, num=max(2, min(points, upto + 1))).round().astype(np.int64)).tolist()
    names = loader.engine.plan.names
    out: dict[str, Any] = {"steps": steps, "sources": {n: {"tokens": [], "expected_tokens": [], "error_tokens": []}
                                                       for n in names}}
    for b in steps:
        acct = accounting(loader, b)
        expected = {n: 0.0 for n in names}
        for phase in acct["phases"]:
            for n, s in phase["sources"].items():
                expected[n] += s["expected_tokens"]
        for n in names:
            src = acct["sources"][n]
            series = out["sources"][n]
            series["tokens"].append(src["tokens"])
            series["expected_tokens"].append(round(expected[n], 1))
            series["error_tokens"].append(src["error_tokens"])
    plan = loader.engine.plan.phases
    out["phase_starts"] = [(b.first_batch, p.name) for p, b in zip(plan.phases, plan.bounds) if b.first_batch <= upto]
    return out


def plot_accounting(series: dict[str, Any], title: str = "") -> bytes:
    """The PNG of `accounting_series`: tokens delivered (solid) and expected (dashed) per source; error."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("matplotlib", extra="plot", purpose="stream --plot") from None
    fig = Figure(figsize=(10, 7), layout="constrained")
    ax_t, ax_e = fig.subplots(2, 1, sharex=True)
    steps = series["steps"]
    for n, s in series["sources"].items():
        line, = ax_t.plot(steps, s["tokens"], label=f"{n} delivered")
        ax_t.plot(steps, s["expected_tokens"], ls="--", color=line.get_color(), label=f"{n} recipe")
        ax_e.plot(steps, s["error_tokens"], color=line.get_color(), label=n)
    for ax in (ax_t, ax_e):
        for first, _ in series["phase_starts"][1:]:
            ax.axvline(first, color="#999999", lw=0.8, ls=":")
    ax_t.set_ylabel("tokens (all ranks)")
    ax_t.legend(fontsize=8, loc="upper left")
    ax_e.axhline(0, color="#444444", lw=0.6)
    ax_e.set_ylabel("delivered − recipe (tokens)")
    ax_e.set_xlabel("step (global batch)")
    fig.suptitle(title or "accounting against the recipe (dotted: phase boundaries)")
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    return out.getvalue()


def write_accounting_plot(loader: Any, upto: int, path: str | os.PathLike[str], points: int = 200) -> dict[str, Any]:
    """Write the PNG of steps 0 … `upto` to `path` (temp file, then rename); returns the series plotted."""
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise ConfigError(f"--plot {p.name}: write a .png file")
    series = accounting_series(loader, upto, points)
    image = plot_accounting(series, f"accounting against recipe {getattr(loader, 'fingerprint', '')[:12]}")
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_bytes(image)
    os.replace(tmp, p)
    return series
