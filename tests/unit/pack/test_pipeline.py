"""ThreadedMap: the 1-worker pack's pipeline of threads keeps order, bounds memory, surfaces errors in
their place in the stream and stops its threads when the caller stops (also on Ctrl-C)."""

import signal
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import PackError, ReaderError
from shardkit.pack.pipeline import ThreadedMap


def _stage_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("shardkit-pack-")]


def _jittered(x: int) -> int:
    if x % 3 == 0:
        time.sleep(0.0005)  # uneven stage times, so the threads interleave differently from item to item
    return x * x + 1


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.integers(0, 10**6), max_size=60), depth=st.integers(1, 4))
def test_results_come_in_input_order(items, depth):
    with ThreadedMap(_jittered, iter(items), depth=depth) as results:
        assert list(results) == [(x, _jittered(x)) for x in items]
    assert not _stage_threads()


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 30), fail_at=st.integers(0, 30), depth=st.integers(1, 3),
       stage=st.sampled_from(["read", "encode"]))
def test_an_error_surfaces_after_every_result_before_it(n, fail_at, depth, stage):
    """The serial loop would have delivered the results before the failing item, then raised: so does this."""
    error = ReaderError("in/a.jsonl.gz", "corrupt gzip data", line=fail_at + 1) if stage == "read" else \
        PackError(f"tokenizer failed on item {fail_at}")

    def items():
        for i in range(n):
            if stage == "read" and i == fail_at:
                raise error
            yield i

    def fn(i):
        if stage == "encode" and i == fail_at:
            raise error
        return -i

    got = []
    with ThreadedMap(fn, items(), depth=depth) as results:
        if fail_at < n:
            with pytest.raises(type(error)) as raised:
                for item, result in results:
                    got.append((item, result))
            assert raised.value is error  # the very exception, with its message (file and line named)
        else:
            got = list(results)
    assert got == [(i, -i) for i in range(min(n, fail_at))]
    assert not _stage_threads()


def test_read_ahead_is_bounded_by_the_queues():
    """Memory stays flat: the reader runs at most two queues (and one item per stage) ahead of the caller."""
    drawn = []

    def items():
        for i in range(1000):
            drawn.append(i)
            yield i

    depth = 2
    with ThreadedMap(lambda x: x, items(), depth=depth) as results:
        for consumed, _ in enumerate(results, 1):
            time.sleep(0.01)  # a slow writer
            assert len(drawn) <= consumed + 2 * depth + 2
            if consumed == 50:
                break
    time.sleep(0.05)
    assert len(drawn) <= 50 + 2 * depth + 2


def test_stopping_early_closes_the_reader_in_its_own_thread():
    closed_in = []

    def items():
        try:
            yield from range(10**6)
        finally:
            closed_in.append(threading.current_thread().name)  # open input files close here

    with ThreadedMap(lambda x: x, items()) as results:
        assert next(results) == (0, 0)
    assert closed_in == ["shardkit-pack-read"]
    assert not _stage_threads()


def test_the_encoder_starts_at_the_first_result():
    """Until the caller asks for a result, it alone uses `fn`'s tokenizer (the pack's self-check runs then)."""
    calls = []
    with ThreadedMap(lambda x: calls.append(x) or x, iter(range(5))) as results:
        time.sleep(0.1)
        assert calls == []  # the reader has read ahead; nothing has been encoded
        assert list(results) == [(i, i) for i in range(5)]


def test_ctrl_c_while_waiting_for_a_result_stops_both_threads():
    """A real SIGINT to the main thread while it waits on a slow encoder: KeyboardInterrupt, then the
    threads end within one item's time."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")

    def slow(x):
        time.sleep(0.3)
        return x

    main = threading.main_thread().ident
    timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT))
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), ThreadedMap(slow, iter(range(10**6))) as results:
        timer.start()
        for _ in results:
            pass
    assert time.monotonic() - t0 < 3
    assert not _stage_threads()


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth"):
        ThreadedMap(lambda x: x, iter([]), depth=0)
