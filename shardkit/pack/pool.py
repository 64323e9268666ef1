"""An ordered, bounded map over worker processes.

`concurrent.futures`' and `multiprocessing.Pool`'s own maps read their whole input eagerly, which would
load a corpus into memory; here at most `max_in_flight` chunks exist at once and results come back in
submission order, so the output never depends on which worker finished first.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

__all__ = ["ordered_map"]

T = TypeVar("T")
P = TypeVar("P")
R = TypeVar("R")


def ordered_map(
    fn: Callable[[P], R],
    items: Iterable[T],
    *,
    payload: Callable[[T], P],
    workers: int,
    initializer: Callable[..., Any],
    initargs: tuple[Any, ...],
    max_in_flight: int | None = None,
) -> Iterator[tuple[T, R]]:
    """Yield (item, fn(payload(item))) in input order; with workers ≤ 1 everything runs in this process."""
    if workers <= 1:
        initializer(*initargs)
        for item in items:
            yield item, fn(payload(item))
        return
    limit = max_in_flight or workers + 2  # one queued chunk per worker beyond the ones running, plus one
    # spawn: workers are this process's children (no lingering server process), start clean of its threads
    ctx = multiprocessing.get_context("spawn")
    pending: deque[tuple[T, Future[R]]] = deque()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_orphan_safe,
                               initargs=(os.getpid(), initializer, initargs))
    finished = False
    try:
        for item in items:
            pending.append((item, pool.submit(fn, payload(item))))
            if len(pending) >= limit:
                done, fut = pending.popleft()
                yield done, fut.result()
        while pending:
            done, fut = pending.popleft()
            yield done, fut.result()
        finished = True
    finally:
        # after the last result the workers only have to exit: do not make the caller wait for that
        # (~0.3 s); on an error or an abandoned iteration, cancel what is queued and wait for them
        pool.shutdown(wait=not finished, cancel_futures=True)


def _init_orphan_safe(parent: int, initializer: Callable[..., Any], initargs: tuple[Any, ...]) -> None:
    """Run `initializer`, then watch the parent: if it dies (even by SIGKILL), this worker exits too."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="shardkit-parent-watch", daemon=True).start()
    initializer(*initargs)
