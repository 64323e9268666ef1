"""An ordered, bounded map over worker processes.

`concurrent.futures`' and `multiprocessing.Pool`'s own maps read their whole input eagerly, which would
load a corpus into memory; here at most `max_in_flight` chunks exist at once and results come back in
submission order, so the output never depends on which worker finished first.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from ..errors import PackError

__all__ = ["ordered_map", "start_pool", "stop_pool"]

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
    pool: ProcessPoolExecutor | None = None,
) -> Iterator[tuple[T, R]]:
    """Yield (item, fn(payload(item))) in input order; with workers ≤ 1 everything runs in this process.

    `pool` (from `start_pool`, started early so the workers' start-up overlaps the caller's own) is used
    instead of a new one; the caller stops it with `stop_pool`. A worker that dies kills it either way.
    """
    if workers <= 1:
        initializer(*initargs)
        for item in items:
            yield item, fn(payload(item))
        return
    limit = max_in_flight or workers + 2  # one queued chunk per worker beyond the ones running, plus one
    pending: deque[tuple[T, Future[R]]] = deque()
    owned = pool is None
    if pool is None:
        pool = start_pool(workers, initializer, initargs, warm=False)
    finished = False
    try:
        for item in items:
            pending.append((item, pool.submit(fn, payload(item))))
            if len(pending) >= limit:
                done, fut = pending.popleft()
                yield done, _result(fut, pool)
        while pending:
            done, fut = pending.popleft()
            yield done, _result(fut, pool)
        finished = True
    except _WorkerDied:
        _kill(pool)
        raise
    except BrokenProcessPool as e:  # raised by submit() once the pool noticed
        _kill(pool)
        raise _WorkerDied(_died_message(pool)) from e
    finally:
        if owned:
            stop_pool(pool, finished)
        elif not finished:  # the caller's pool stays up (a fall-back may run on it): drop what is queued
            for _, fut in pending:
                fut.cancel()


def start_pool(workers: int, initializer: Callable[..., Any], initargs: tuple[Any, ...], *,
               warm: bool = True) -> ProcessPoolExecutor:
    """A pool of `workers` spawned processes; `warm` starts them all now (they import and initialise
    while this process goes on), rather than on demand at the first tasks."""
    # spawn: workers are this process's children (no lingering server process), start clean of its threads
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_orphan_safe,
                               initargs=(os.getpid(), initializer, initargs))
    if warm:
        with _bare_main():  # each submit spawns one worker now, while __main__ is hidden
            for _ in range(workers):
                pool.submit(_nothing)
    return pool


@contextlib.contextmanager
def _bare_main() -> Iterator[None]:
    """Spawn workers without re-running the parent's main module in each.

    `spawn` imports the parent's `__main__` in every child (for functions defined there); the workers run
    only this package's functions, and for the CLI that import (every command's module) cost ~0.3 s of
    CPU per worker, on the cores the pack is using. An empty stand-in is seen while the workers spawn.
    """
    real = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = real


def _nothing() -> None:
    return None


def stop_pool(pool: ProcessPoolExecutor, finished: bool = True) -> None:
    """Shut the pool down, waiting for the workers to exit unless one died (see `_kill`)."""
    # wait for the workers to exit, also after the last result: the pool starts workers on demand, so
    # one may still be starting (running its initializer) when the last result arrives, and the caller
    # removes what the workers read (the pack's scratch directory) as soon as this returns
    pool.shutdown(wait=finished or not _broken(pool), cancel_futures=True)


class _WorkerDied(PackError):
    """A worker process was killed (OOM killer, SIGKILL) or crashed: nothing it was doing was written."""


_POLL = 1.0  # seconds between liveness checks while a result is awaited


def _result(fut: Future[R], pool: ProcessPoolExecutor) -> R:
    """fut.result(), but a dead worker is an error, never a hang: `concurrent.futures` can wait forever
    for the rest of a result that a killed worker was in the middle of sending."""
    dead_since: float | None = None
    while True:
        try:
            return fut.result(timeout=_POLL)
        except FutureTimeout:
            pass
        except BrokenProcessPool as e:
            raise _WorkerDied(_died_message(pool)) from e
        if _broken(pool):
            dead_since = dead_since or time.monotonic()
            if time.monotonic() - dead_since > 5 * _POLL:  # its result did not arrive after all
                raise _WorkerDied(_died_message(pool))


def _broken(pool: ProcessPoolExecutor) -> bool:
    procs = getattr(pool, "_processes", None) or {}
    return any(p.exitcode not in (None, 0) for p in list(procs.values()))


def _died_message(pool: ProcessPoolExecutor) -> str:
    procs = getattr(pool, "_processes", None) or {}
    codes = sorted({p.exitcode for p in list(procs.values()) if p.exitcode not in (None, 0)})
    how = ", ".join(f"signal {-c}" if c < 0 else f"exit code {c}" for c in codes) or "unknown cause"
    return (f"a tokenizer worker process died ({how}; SIGKILL 9 is often the out-of-memory killer): nothing "
            "it was working on was written; re-run the same shardkit pack command to resume after the last "
            "finished shard (with fewer --workers if memory is short)")


def _kill(pool: ProcessPoolExecutor) -> None:
    """Kill the remaining workers and unblock the executor's thread, which may be stuck reading the rest of
    a message from the dead one (it would hold up interpreter exit forever): with every worker gone, closing
    our own end of the result pipe's writer gives it end-of-file."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.exitcode is None:
            p.kill()
    for p in procs:
        p.join(timeout=5)
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    if writer is not None:
        with contextlib.suppress(OSError):
            writer.close()


def _init_orphan_safe(parent: int, initializer: Callable[..., Any], initargs: tuple[Any, ...]) -> None:
    """Run `initializer`, then watch the parent: if it dies (even by SIGKILL), this worker exits too."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="shardkit-parent-watch", daemon=True).start()
    initializer(*initargs)
