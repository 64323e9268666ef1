"""The 1-worker pack as a pipeline of threads: reading, tokenizing and writing overlap on two cores.

One thread runs the chunk iterator (read, decompress, decode JSON: mostly under the GIL), one runs the
tokenizer (fastokens, tiktoken and `tokenizers` release the GIL while they encode) and the caller's
thread consumes the results in input order (writing, checksums, the journal). Each stage still handles
its items one at a time and in order, so the output is the serial loop's, byte for byte; the queues
between the stages hold at most `depth` items each, so memory stays flat whatever the corpus size.

An exception in any stage is raised in the caller's thread as it was raised (the same `PackError` or
`ReaderError`, with its message), at the point where the stream reaches it: results before it are
delivered first, exactly as the serial loop would have written them. Closing the iterator (the caller
stopped, or a KeyboardInterrupt in the caller's thread) stops both threads within one item's time.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["ThreadedMap"]

T = TypeVar("T")
R = TypeVar("R")

_END = object()
_WAIT = 0.1  # seconds between checks of the stop flag while a queue is full or empty


class _Failed:
    """An exception raised in a stage thread, travelling down the pipeline in its place in the stream."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class ThreadedMap(Generic[T, R]):
    """Iterate (item, fn(item)) in input order; `items` is drawn in one thread, `fn` runs in another.

    The reading thread starts at construction, so whatever the caller does before its first `next()`
    (a tokenizer's self-check) overlaps the first reads; the encoding thread starts at that first
    `next()`, so until then the caller alone uses `fn`'s tokenizer. Use as a context manager or call
    `close()`.
    """

    def __init__(self, fn: Callable[[T], R], items: Iterable[T], *, depth: int = 2,
                 name: str = "shardkit-pack") -> None:
        if depth < 1:
            raise ValueError(f"depth must be ≥ 1, got {depth}")
        self._fn = fn
        self._items = items
        self._inbox: queue.Queue[Any] = queue.Queue(depth)
        self._outbox: queue.Queue[Any] = queue.Queue(depth)
        self._stop = threading.Event()
        self._done = False
        self._threads = [threading.Thread(target=self._produce, name=f"{name}-read", daemon=True),
                         threading.Thread(target=self._map, name=f"{name}-encode", daemon=True)]
        self._threads[0].start()

    def _put(self, q: queue.Queue[Any], value: Any) -> bool:
        """Put `value` once there is room; False if the pipeline was stopped first."""
        while not self._stop.is_set():
            try:
                q.put(value, timeout=_WAIT)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, q: queue.Queue[Any]) -> Any:
        while not self._stop.is_set():
            try:
                return q.get(timeout=_WAIT)
            except queue.Empty:
                continue
        return _END

    def _produce(self) -> None:
        it = iter(self._items)
        try:
            for item in it:
                if not self._put(self._inbox, item):
                    return
            self._put(self._inbox, _END)
        except BaseException as e:  # handed on in its place: the caller raises it after the items before it
            self._put(self._inbox, _Failed(e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:  # a generator: its open input files close now, in the thread that runs it
                close()

    def _map(self) -> None:
        fn = self._fn
        while True:
            item = self._get(self._inbox)
            if item is _END or isinstance(item, _Failed):
                self._put(self._outbox, item)
                return
            try:
                result = fn(item)
            except BaseException as e:
                self._put(self._outbox, _Failed(e))
                return
            if not self._put(self._outbox, (item, result)):
                return

    def __iter__(self) -> Iterator[tuple[T, R]]:
        return self

    def __next__(self) -> tuple[T, R]:
        if self._done:
            raise StopIteration
        if self._threads[1].ident is None:  # the first call: encoding starts now
            self._threads[1].start()
        value = self._outbox.get()  # interruptible: a KeyboardInterrupt here propagates to the caller
        if value is _END:
            self.close()
            raise StopIteration
        if isinstance(value, _Failed):
            self.close()
            raise value.error
        return value  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop both threads and wait for them (each finishes at most the item it is working on)."""
        self._done = True
        self._stop.set()
        for t in self._threads:
            if t.ident is not None and t is not threading.current_thread():
                t.join()

    def __enter__(self) -> ThreadedMap[T, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
