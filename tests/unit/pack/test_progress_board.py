"""The one progress view of a split job: the tasks' latest progress summed, finished tasks counted once."""

from shardkit.pack.driver import PackProgress
from shardkit.pack.executors import ProgressBoard, TaskOutcome


def _p(docs, done, total, shards=1, skipped=0):
    return PackProgress(docs=docs, tokens=10 * docs, input_bytes_done=done, input_bytes_total=total, shards=shards,
                        skipped=skipped, elapsed=1.0)


def test_sums_latest_progress_and_counts_finished_tasks():
    seen = []
    board = ProgressBoard([100, 50, 0], seen.append, interval=0)
    board.update(0, _p(3, 30, 100))
    board.update(0, _p(5, 60, 100))  # replaces task 0's earlier report
    board.update(1, _p(2, 10, 50))
    snap = board.snapshot()
    assert (snap.pack.docs, snap.pack.tokens, snap.pack.input_bytes_done) == (7, 70, 70)
    assert snap.pack.input_bytes_total == 150 and snap.tasks_done == 0 and snap.tasks_total == 3
    board.finished(TaskOutcome(1, "/p/1", "f" * 64, docs=4, tokens=40, shards=2, skipped=1, weight=50, seconds=1.0,
                               reused=False))
    board.update(1, _p(1, 5, 50))  # a late report of a finished task is ignored
    snap = board.snapshot()
    assert (snap.pack.docs, snap.pack.input_bytes_done, snap.pack.skipped, snap.tasks_done) == (9, 110, 1, 1)
    assert seen[-1].tasks_done == 1 and seen[-1].pack.docs == 9


def test_throttles_reports_but_never_a_finish():
    seen = []
    board = ProgressBoard([10], seen.append, interval=3600)
    board.update(0, _p(1, 1, 10))
    board.update(0, _p(2, 2, 10))
    n = len(seen)
    board.finished(TaskOutcome(0, "/p/0", "f" * 64, docs=2, tokens=20, shards=1, skipped=0, weight=10, seconds=1.0,
                               reused=True))
    assert len(seen) == n + 1 and seen[-1].tasks_done == 1 and seen[-1].pack.resumed_docs == 2
