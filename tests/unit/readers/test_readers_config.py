"""ReaderConfig validation, the Record type, and dispatch by extension."""

from __future__ import annotations

import dataclasses

import pytest

from shardkit.errors import ConfigError, InputError
from shardkit.readers import ReaderConfig, Record, read_records
from shardkit.readers.records import make_record
from shardkit.sources import InputFile


@pytest.mark.parametrize("kw", [
    {"text_field": ""}, {"text_field": "a..b"}, {"text_field": ".a"}, {"text_field": "a."},
    {"id_field": ""}, {"id_field": " "}, {"encoding_errors": "ignore"}, {"text_field": 3},
])
def test_bad_config_is_refused(kw):
    with pytest.raises(ConfigError):
        ReaderConfig(**kw)


def test_config_defaults_and_is_frozen_kw_only():
    cfg = ReaderConfig()
    assert (cfg.text_field, cfg.id_field, cfg.encoding_errors) == ("text", None, "strict")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.text_field = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ReaderConfig("text")  # type: ignore[misc]


def test_fast_record_equals_constructed_record():
    a = make_record(3, "t", "id", None, "p:4")
    b = Record(index=3, text="t", doc_id="id", error=None, location="p:4")
    assert a == b and hash(a) == hash(b) and type(a) is Record
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.text = "y"  # type: ignore[misc]


def test_unknown_extension_and_negative_start(tmp_path):
    f = InputFile(url=str(tmp_path / "data.csv"), size=0, source="x")
    with pytest.raises(InputError, match="data.csv: unsupported file extension"):
        read_records(f, ReaderConfig())
    g = InputFile(url=str(tmp_path / "data.jsonl"), size=0, source="x")
    with pytest.raises(ConfigError):
        read_records(g, ReaderConfig(), start=-1)
