"""An ordered, bounded map over worker processes.

`concurrent.futures`' and `multiprocessing.Pool`'s own maps read their whole input eagerly, which would
load a corpus into memory; here at most `max_in_flight` chunks exist at once and results come back in
submission order, so the output never depends on which worker finished first.
"""

from __future__ import annotations

import multiprocessing
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
    limit = max_in_flight or 2 * workers
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                                      else "spawn")
    pending: deque[tuple[T, Future[R]]] = deque()
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=initializer,
                             initargs=initargs) as pool:
        try:
            for item in items:
                pending.append((item, pool.submit(fn, payload(item))))
                if len(pending) >= limit:
                    done, fut = pending.popleft()
                    yield done, fut.result()
            while pending:
                done, fut = pending.popleft()
                yield done, fut.result()
        finally:
            for _, fut in pending:
                fut.cancel()
