"""Live accounting: its per-phase, per-source token totals equal what every rank actually delivered — with
skips, after a resume on another world size — and its proportions and errors follow from those totals."""

import itertools
from collections import Counter

import pytest
from support.mixtures import make_sources

from shardkit.loader import Loader, MixtureLoader

SEQ = 16


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("acct")
    make_sources(root)
    return root


def _recipe():
    return {"seed": 5, "seq_len": SEQ, "sources": {n: {"path": n} for n in ("web", "code", "math")},
            "phases": [{"name": "a", "tokens": 3000, "batch": 8, "mix": {"web": 0.5, "code": 0.3, "math": 0.2}},
                       {"name": "b", "tokens": 3000, "batch": 4, "seq_len": 2 * SEQ, "mix": {"web": 0.5, "math": 0.5}}]}


def _delivered(data, world, stop, skip=(), state=None):
    """{(phase name, source): tokens} delivered by all ranks before global batch `stop`."""
    got = Counter()
    for rank in range(world):
        ld = MixtureLoader(_recipe(), base_dir=data, readahead=False, rank=rank, world_size=world, skip=skip)
        if state is not None:
            ld.load_state_dict(state)
        for item in ld:
            if item["batch_index"] >= stop:
                break
            names = ld.plan.sources
            for s in item["source"].tolist():
                got[(item["phase_name"], names[s])] += item["input_ids"].shape[1]
    return got


@pytest.mark.parametrize("skip", [(), ([3, 4], [20, 22])])
def test_totals_equal_what_was_delivered(data, skip):
    world = 2
    ld = MixtureLoader(_recipe(), base_dir=data, readahead=False, world_size=world, rank=0, skip=skip)
    for stop in (7, 25, ld.num_batches()):
        acct = ld.accounting(stop)
        got = _delivered(data, world, stop, skip)
        table = Counter({(p["name"], n): s["tokens"] for p in acct["phases"] for n, s in p["sources"].items()
                         if s["tokens"]})
        assert table == got
        assert acct["tokens"] == sum(got.values())
        for n, s in acct["sources"].items():
            assert s["tokens"] == sum(v for (_, src), v in got.items() if src == n)
        for p in acct["phases"]:
            total = sum(s["tokens"] for s in p["sources"].values())
            assert p["tokens"] == total
            for s in p["sources"].values():
                assert s["error_tokens"] == pytest.approx(s["tokens"] - s["weight"] * total, abs=0.1)
                if total:
                    assert s["proportion"] == pytest.approx(s["tokens"] / total, abs=1e-6)
        if skip:
            assert sum(s["skipped_tokens"] for s in acct["sources"].values()) > 0


def test_accounting_after_a_resume_on_another_world_size(data):
    ld = MixtureLoader(_recipe(), base_dir=data, readahead=False, world_size=2, rank=1)
    for _ in itertools.islice(ld, 9):
        pass
    state = ld.state_dict()
    other = MixtureLoader(_recipe(), base_dir=data, readahead=False, world_size=4, rank=3)
    other.load_state_dict(state)
    assert other.accounting() == ld.accounting() and other.accounting()["batch"] == 9


def test_epochs_and_documents_of_a_single_dataset(data):
    ld = Loader(data / "math", seq_len=SEQ, batch_schedule=4, readahead=False, max_epochs=2)
    n = ld.num_batches()
    end = ld.accounting(n)["sources"]["data"]
    assert end["epochs"] == pytest.approx(2.0, abs=4 / ld.num_samples)
    assert end["documents_seen"] == end["documents"] and end["documents_seen_exact"]
    half = ld.accounting(n // 4)["sources"]["data"]
    assert 0.4 < half["epochs"] < 0.6 and not half["documents_seen_exact"]
    assert ld.accounting(n)["phases"][0]["target_tokens"] is None  # no budget: no target
