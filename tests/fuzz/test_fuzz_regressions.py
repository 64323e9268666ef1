"""One test per bug the fuzzers (atheris, hypothesis) found in a parser; the inputs are in fuzz/corpus/.

Each names the input that crashed, what escaped, and checks the outcome is now a result or a
ShardkitError with a clear message.
"""

import io
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fuzz import targets
from shardkit.errors import ConfigError, ManifestError, ReaderError
from shardkit.format.checksums import ShardChecksums
from shardkit.mixture import load_recipe
from shardkit.readers import ReaderConfig, read_records
from shardkit.sources import InputFile

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"


def _records(path, cfg=None):
    return list(read_records(InputFile(url=str(path), size=path.stat().st_size, source="t"), cfg or ReaderConfig()))


def test_jsonl_error_column_does_not_depend_on_the_block():
    """reader_jsonl: a CRLF line's error column moved by one when another line of its block was bad UTF-8."""
    data = (CORPUS / "reader_jsonl" / "regress-crlf-column-by-block.jsonl").read_bytes()
    url = "memory://fuzz/in.jsonl"
    outcomes = {bs: targets._records(url, data, 0, bs) for bs in targets._BLOCKS}
    assert len(set(map(repr, outcomes.values()))) == 1, outcomes
    records, _ = outcomes[1 << 20]
    assert records[1][3] == "invalid JSON: Expecting ':' delimiter (col 9)"


def test_parquet_column_name_in_bad_utf8_is_a_reader_error(tmp_path):
    """reader_parquet: pyarrow's UnicodeDecodeError for a column name escaped ParquetFile()."""
    path = tmp_path / "bad.parquet"
    path.write_bytes((CORPUS / "reader_parquet" / "regress-column-name-bad-utf8.parquet").read_bytes())
    with pytest.raises(ReaderError, match="not a readable parquet file"):
        _records(path)


def test_parquet_string_id_in_bad_utf8_is_replaced(tmp_path):
    """reader_parquet: an id value in invalid UTF-8 raised UnicodeDecodeError from to_pylist()."""
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": ["a", "b"], "id": pa.array([b"\xff1", b"ok"], pa.binary())}), buf)
    raw = buf.getvalue()
    path = tmp_path / "ids.parquet"
    # the same file with the id column declared as (unvalidated) UTF-8 strings
    table = pq.read_table(io.BytesIO(raw))
    table = table.set_column(1, "id", table.column("id").cast(pa.string(), safe=False))
    pq.write_table(table, path)
    recs = _records(path, ReaderConfig(id_field="id"))
    assert [(r.text, r.doc_id) for r in recs] == [("a", "\ufffd1"), ("b", "ok")]
    assert targets.run_one(targets.TARGETS["reader_parquet"],
                           (CORPUS / "reader_parquet" / "regress-id-bad-utf8.parquet").read_bytes()) == "error"


def test_sidecar_nested_too_deeply_is_a_manifest_error():
    """checksums: json's RecursionError escaped ShardChecksums.from_bytes."""
    with pytest.raises(ManifestError, match="not valid JSON"):
        ShardChecksums.from_bytes(b"[" * 100_000 + b"]" * 100_000, "x.sum.json")


@pytest.mark.parametrize("suffix,text", [
    (".json", "[" * 100_000 + "]" * 100_000),
    (".yaml", "[" * 100_000 + "]" * 100_000),
    (".toml", "a = " + "[" * 100_000 + "]" * 100_000),
    (".json", '{"seed": ' + "1" * 5000 + "}"),
    (".yaml", "seed: " + "1" * 5000),
    (".toml", "seed = " + "1" * 5000),
], ids=["json-deep", "yaml-deep", "toml-deep", "json-bigint", "yaml-bigint", "toml-bigint"])
def test_recipe_file_that_breaks_the_decoder_is_a_config_error(tmp_path, suffix, text):
    """recipe_*: RecursionError (deep nesting) and ValueError (ints past 4300 digits) escaped load_recipe."""
    path = tmp_path / f"r{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"not valid {suffix[1:].upper()}"):
        load_recipe(path)


def _recipe(**phase):
    return {"seq_len": 8, "sources": {"a": {"path": "a"}},
            "phases": [{"name": "p", "tokens": 1000, "batch": 2, "mix": {"a": 1}, **phase}]}


@pytest.mark.parametrize("phase,message", [
    ({"tokens": "1e400"}, "not a whole, non-negative quantity"),  # parse_count: OverflowError (inf)
    ({"tokens": 10**40}, "too large"),  # the phase plan: OverflowError
    ({"seq_len": 2**63}, "too large"),
    ({"batch": 10**30}, "too large"),
    ({"batch": "²"}, "expected an integer, got '²'"),  # str.isdigit() is true for '²', int() is not
    ({"batch": "9" * 5000}, "expected an integer, got '999"),  # int() past 4300 digits
])
def test_recipe_numbers_out_of_range_are_config_errors(phase, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe(_recipe(**phase)).plan  # noqa: B018


def test_recipe_error_messages_stay_short_for_huge_values():
    """A YAML alias bomb ('billion laughs') was fully repr()'d into the error message: a hang."""
    laughs = ["lol"] * 10
    for _ in range(8):
        laughs = [laughs] * 10  # 10**9 leaves, shared: cheap to build, not to repr
    for bad in ({"phases": laughs, "sources": {"a": {"path": "a"}}},
                {**_recipe(), "shuffle": laughs}, {**_recipe(), "weights_by": laughs},
                _recipe(batch={"piecewise": {"pieces": laughs, "final": 4}}),
                {**_recipe(), "sources": {"a": {"path": laughs}}}):
        with pytest.raises(ConfigError) as e:
            load_recipe(bad)
        assert len(str(e.value)) < 600, str(e.value)[:200]


def test_yaml_alias_bomb_recipe_file(tmp_path):
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 9):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    body = "\n".join(f"  {ln}" for ln in lines)
    path = tmp_path / "bomb.yaml"
    path.write_text(f"seq_len: 8\nsources:\n  a: {{path: a}}\nversion: 1\nseed: 1\nshuffle: block\n"
                    f"weights_by: tokens\nphases:\n  - name: p\n    tokens: 10\n    batch: 2\n    mix:\n"
                    f"      a:\n{body.replace('  ', '        ', 1)}\n")
    with pytest.raises(ConfigError) as e:
        load_recipe(path)
    assert len(str(e.value)) < 600


def test_deeply_nested_yaml_recipe_is_refused_quickly(tmp_path):
    """recipe_yaml (hypothesis): PyYAML's pure-Python scanner took ~4 s on 2 KiB of brackets (quadratic)."""
    path = tmp_path / "deep.yaml"
    path.write_text('{"seed": ' + "[" * 1000 + "]" * 1000 + "}")
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_recipe(path)
    assert time.monotonic() - t0 < 1.0
