"""Batch-size schedules: exact Megatron ramp, piecewise rounding rules, JSON form, resume lookups."""

import json

import numpy as np
import pytest

from shardkit.errors import ConfigError
from shardkit.order import Constant, Piecewise, Ramp, ScheduleUnit, parse_schedule


def _megatron_sizes(start, increment, ramp_samples, final, count):
    """Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator.update, literally."""
    n_inc = (final - start) // increment
    spi = ramp_samples / n_inc
    consumed, out = 0, []
    for _ in range(count):
        size = final if consumed > ramp_samples else start + int(consumed / spi) * increment
        out.append(size)
        consumed += size
    return out


def test_constant():
    c = Constant(8)
    assert (c.size(5), c.start(5), c.batch_at_sample(47), c.batch_at_sample(48)) == (8, 40, 5, 6)
    assert c.start(np.array([0, 1, 10**12])).tolist() == [0, 8, 8 * 10**12]
    assert c.stages == ((0, 0, 8),)
    with pytest.raises(ConfigError, match="batch size"):
        Constant(0)


def test_ramp_matches_megatron_including_float_rounding():
    r = Ramp(start=1, increment=1, ramp_samples=27, final=14)
    sizes = _megatron_sizes(1, 1, 27, 14, 12)
    assert [r.size(b) for b in range(12)] == sizes
    # batch 8 starts at exactly 27 samples: 27 / (27 / 13) = 12.999… in floats, so Megatron (and we) use 13
    assert r.start(8) == 27 and r.size(8) == 13 and r.size(9) == 14
    big = Ramp(start=256, increment=256, ramp_samples=10_000_000, final=4096)
    assert [big.size(b) for b in range(5000)] == _megatron_sizes(256, 256, 10_000_000, 4096, 5000)
    assert big.size(10**9) == 4096 and big.start(10**9) > 0


def test_ramp_validation():
    with pytest.raises(ConfigError, match="multiple of the increment"):
        Ramp(start=4, increment=3, ramp_samples=10, final=12)
    with pytest.raises(ConfigError, match="constant"):
        Ramp(start=8, increment=8, ramp_samples=10, final=8)
    with pytest.raises(ConfigError, match="ramp_samples"):
        Ramp(start=8, increment=8, ramp_samples=0, final=16)
    with pytest.raises(ConfigError):
        Ramp(start=True, increment=8, ramp_samples=1, final=16)


def test_piecewise_by_steps():
    p = Piecewise(pieces=((3, 2), (5, 4)), final=8)
    assert [p.size(b) for b in range(7)] == [2, 2, 2, 4, 4, 8, 8]
    assert p.stages == ((0, 0, 2), (3, 6, 4), (5, 14, 8))
    assert p.unit is ScheduleUnit.STEPS


def test_piecewise_token_boundary_rounds_up_to_a_batch_boundary():
    p = Piecewise(pieces=((1000, 4),), final=8, unit="tokens", seq_len=100)
    # 4 samples × 100 tokens a batch: batches 0..2 start at 0, 400, 800 tokens (< 1000) and keep size 4;
    # batch 2 crosses the boundary but is not split; batch 3 starts at 1200 tokens with the new size
    assert [p.size(b) for b in range(5)] == [4, 4, 4, 8, 8]
    exact = Piecewise(pieces=((800, 4),), final=8, unit="tokens", seq_len=100)
    assert [exact.size(b) for b in range(4)] == [4, 4, 8, 8]  # a boundary on a batch start switches there
    skipped = Piecewise(pieces=((100, 50), (200, 3)), final=7, unit="tokens", seq_len=10)
    assert [skipped.size(b) for b in range(3)] == [50, 7, 7]  # the first batch overshoots the 3-piece


def test_piecewise_validation():
    with pytest.raises(ConfigError, match="increase"):
        Piecewise(pieces=((5, 2), (5, 4)), final=8)
    with pytest.raises(ConfigError, match="seq_len"):
        Piecewise(pieces=((5, 2),), final=8, unit="tokens")
    with pytest.raises(ConfigError, match="seq_len"):
        Piecewise(pieces=((5, 2),), final=8, seq_len=128)
    with pytest.raises(ConfigError, match="unit"):
        Piecewise(pieces=((5, 2),), final=8, unit="epochs")
    with pytest.raises(ConfigError, match="pairs"):
        Piecewise(pieces=((5, 2, 1),), final=8)
    with pytest.raises(ConfigError, match="size"):
        Piecewise(pieces=((5, 0),), final=8)
    assert Piecewise(pieces=(), final=8).stages == Constant(8).stages


def test_lookups_are_vectorised_and_consistent():
    r = Ramp(start=2, increment=2, ramp_samples=100, final=10)
    b = np.arange(200)
    assert r.size(b).tolist() == [r.size(int(i)) for i in b]
    assert r.start(b).tolist() == [r.start(int(i)) for i in b]
    s = np.arange(r.start(199))
    assert r.batch_at_sample(s).tolist() == [r.batch_at_sample(int(i)) for i in s]
    with pytest.raises(ConfigError, match="batch index"):
        r.size(-1)
    with pytest.raises(ConfigError, match="sample index"):
        r.batch_at_sample(np.array([-3]))


def test_batch_starting_at_is_exact():
    r = Ramp(start=4, increment=4, ramp_samples=100, final=16)
    assert all(r.batch_starting_at(r.start(b)) == b for b in range(50))
    with pytest.raises(ConfigError, match=r"not a batch boundary.*\[36, 44\)"):
        r.batch_starting_at(37)


@pytest.mark.parametrize("schedule", [
    Constant(8),
    Ramp(start=16, increment=16, ramp_samples=1000, final=256),
    Piecewise(pieces=((10, 4), (20, 8)), final=16),
    Piecewise(pieces=((10_000, 4),), final=16, unit=ScheduleUnit.TOKENS, seq_len=512),
])
def test_json_round_trip(schedule):
    text = json.dumps(schedule.to_json())
    assert parse_schedule(json.loads(text)) == schedule
    assert parse_schedule(schedule) is schedule


def test_parse_schedule_forms_and_errors():
    assert parse_schedule(8) == Constant(8) == parse_schedule({"constant": 8}) == parse_schedule(
        {"constant": {"size": 8}})
    assert parse_schedule({"ramp": {"start": 1, "increment": 1, "ramp_samples": 5, "final": 3}}).final == 3
    with pytest.raises(ConfigError, match="unknown batch schedule"):
        parse_schedule({"linear": 3})
    with pytest.raises(ConfigError, match="unknown field"):
        parse_schedule({"ramp": {"start": 1, "increment": 1, "ramp_samples": 5, "final": 3, "warmup": 1}})
    with pytest.raises(ConfigError, match="missing or malformed"):
        parse_schedule({"ramp": {"start": 1, "increment": 1}})
    with pytest.raises(ConfigError, match="missing or malformed"):
        parse_schedule({"piecewise": {"final": 3}})
    for bad in (True, "8", [8], {"constant": 8, "ramp": {}}):
        with pytest.raises(ConfigError):
            parse_schedule(bad)
