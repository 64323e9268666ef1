"""The skip budget's arithmetic (pack/budget.py): records and bytes, chosen skips, the suggested budget."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import PackError
from shardkit.pack.budget import check_skip_budget, empty_files, skip_usage
from shardkit.pack.stats import PackStats
from shardkit.sources import InputFile

# per file: (size, docs, counted skips, chosen skips)
files_st = st.lists(st.tuples(st.integers(1, 10**9), st.integers(0, 50), st.integers(0, 50), st.integers(0, 5)),
                    min_size=1, max_size=8)


def _stats(spec):
    s = PackStats()
    for i, (_size, docs, bad, chosen) in enumerate(spec):
        for _ in range(docs):
            s.docs += 1
            s._file(i)[0] += 1
        for k in range(bad):
            s.add_skip("src", f"f{i}:{k}", "invalid JSON: x", file=i)
        for k in range(chosen):
            s.add_skip("src", f"f{i}:c{k}", "invalid UTF-8 at byte 3", file=i, chosen=True)
    return s, [InputFile(url=f"f{i}", size=size, source="src") for i, (size, *_r) in enumerate(spec)]


@settings(max_examples=300, deadline=None)
@given(files_st)
def test_usage_is_a_share_and_never_counts_chosen_skips(spec):
    s, files = _stats(spec)
    u = skip_usage(s, files)
    assert 0.0 <= u.record_fraction <= 1.0 and 0.0 <= u.byte_fraction <= 1.0
    assert u.counted == sum(b for *_x, b, _c in spec) and u.chosen == sum(c for *_x, c in spec)
    if u.counted == 0:
        assert u.record_fraction == u.byte_fraction == 0.0
    # a file that yields nothing but bad records counts whole in the bytes measure
    lost_whole = sum(size for size, docs, bad, chosen in spec if bad and not docs and not chosen)
    assert u.byte_fraction >= lost_whole / sum(f.size for f in files) - 1e-12
    # the suggested budget always admits what was seen; anything below the usage refuses it
    if u.counted:
        with pytest.raises(PackError) as e:
            check_skip_budget(s, files, max(0.0, u.fraction - 1e-9), "strict")
        suggested = float(e.value.args[0].split("--max-skip-fraction ")[-1].split()[0])
        assert check_skip_budget(s, files, suggested, "strict") == u
    else:
        assert check_skip_budget(s, files, 0.0, "strict") == u


def test_budget_message_and_empty_files():
    s, files = _stats([(100, 999, 0, 0), (10_000, 0, 1, 0)])
    assert empty_files(s, files) == [{"file": "f1", "first_problem": "f1:0: invalid JSON: x"}]
    with pytest.raises(PackError) as e:
        check_skip_budget(s, files, 0.005, "strict")
    msg = str(e.value)
    assert "skipped 1 of 1,000 record(s) (0.10%; about 99.01% of the input bytes)" in msg
    assert "top reasons: invalid JSON: 1" in msg and "f1:0: invalid JSON: x" in msg
    assert "--max-skip-fraction 0.9901" in msg  # 0.990099 rounded up


def test_stats_round_trip_keeps_per_file_counts_in_the_journal_only():
    s, _files = _stats([(10, 2, 1, 1)])
    assert "files" not in s.to_json()  # the manifest's stats (and fingerprint) are as they were
    again = PackStats.from_json(s.to_json(internal=True))
    assert again.files == s.files and again.to_json() == s.to_json()
