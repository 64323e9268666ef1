"""A one-line live status for long work: rates, percentage and ETA, redrawn in place on a terminal."""

from __future__ import annotations

import sys
import time

import click

from shardkit.units import human_bytes, human_count

__all__ = ["StatusLine", "format_duration"]


def format_duration(seconds: float) -> str:
    if seconds < 10:
        return f"{max(0.0, seconds):.1f}s"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class StatusLine:
    """Redraws in place on a TTY; elsewhere prints a line every `log_every` seconds."""

    def __init__(self, *, enabled: bool = True, log_every: float = 10.0) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.log_every = log_every
        self._last_log = time.monotonic()  # first periodic line after log_every, not at once
        self._width = 0

    def update(self, text: str) -> None:
        if not self.enabled:
            return
        if self.tty:
            pad = max(0, self._width - len(text))
            click.echo("\r" + text + " " * pad, nl=False, err=True)
            self._width = len(text)
        elif time.monotonic() - self._last_log >= self.log_every:
            self._last_log = time.monotonic()
            click.echo(text, err=True)

    def close(self) -> None:
        if self.enabled and self.tty and self._width:
            click.echo("\r" + " " * self._width + "\r", nl=False, err=True)


def pack_status(p) -> str:
    """docs/s, tokens/s, MB/s of input, percentage and ETA for a PackProgress."""
    el = max(p.elapsed, 1e-9)
    new_docs = p.docs - p.resumed_docs
    frac = p.input_bytes_done / p.input_bytes_total if p.input_bytes_total else 0.0
    rate_b = p.input_bytes_done / el
    eta = (p.input_bytes_total - p.input_bytes_done) / rate_b if rate_b > 0 else 0
    return (f"packing {frac:6.1%} {human_bytes(p.input_bytes_done)}/{human_bytes(p.input_bytes_total)} | "
            f"{human_count(new_docs / el)} docs/s | {human_count((p.tokens - p.resumed_tokens) / el)} tok/s | "
            f"{rate_b / 1e6:.1f} MB/s | {p.shards} shards | {p.skipped} skipped | ETA {format_duration(eta)}")
