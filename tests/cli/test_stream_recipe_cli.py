"""`shardkit stream --recipe`: a mixture dry run with a per-source table, JSON, and clear errors."""

import json

import pytest
from click.testing import CliRunner
from support.mixtures import make_sources

from cli.main import cli

RECIPE = """\
seed: 5
seq_len: 16
phases:
  - {name: warmup, tokens: 2000, batch: 8, mix: {web: 0.6, code: 0.3, math: 0.1}}
  - {name: long, tokens: 4000, batch: 4, seq_len: 32, mix: {web: 0.5, math: 0.5}}
sources:
  web: {path: web}
  code: {path: code}
  math: {path: math%s}
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    d = tmp_path_factory.mktemp("rcli")
    make_sources(d)
    (d / "recipe.yaml").write_text(RECIPE % "")
    return d


def _run(*args, code=0):
    r = CliRunner().invoke(cli, ["stream", *map(str, args)])
    assert r.exit_code == code, r.output
    return r


def _json(*args):
    return json.loads(_run(*args, "--json").stdout)


def test_json_report_is_deterministic_and_worker_independent(root):
    recipe = root / "recipe.yaml"
    a = _json("--recipe", recipe, "--steps", "1000")
    assert a["batches"] == 16 + 32 and a["ended"] and a["end_reason"].startswith("the recipe ends")
    assert a["tokens"] == 16 * 8 * 16 + 32 * 4 * 32
    assert _json("--recipe", recipe, "--steps", "1000")["digest"] == a["digest"]
    assert _json("--recipe", recipe, "--steps", "1000", "--workers", "2")["digest"] == a["digest"]
    m = a["mixture"]
    assert set(m["sources"]) == {"code", "math", "web"} and m["tokens"] == a["tokens"]
    assert sum(s["samples"] for s in m["sources"].values()) == a["samples"]
    assert a["state_after"]["batch"] == 48 and a["fingerprint"] == a["state_after"]["stream"]["fingerprint"]
    half = [_json("--recipe", recipe, "--steps", "1000", "--world-size", "2", "--rank", str(r)) for r in (0, 1)]
    assert half[0]["samples"] + half[1]["samples"] == a["samples"] and half[0]["digest"] != half[1]["digest"]


def test_text_output_ends_with_a_table_per_source(root):
    out = _run("--recipe", root / "recipe.yaml", "--steps", "20").output
    lines = out.splitlines()
    assert lines[0].startswith("streamed 20 batches (0..19)")
    assert "next batch 20: phase 2/2 'long', batch 4 of 32, seq_len 32" in out
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["source", "weight"])
    rows = {line.split()[0]: line.split() for line in lines[header + 1:header + 4]}
    assert set(rows) == {"code", "math", "web"} and rows["web"][1] == "0.5" and rows["code"][1] == "0"
    assert lines[-1].startswith("  digest ")


def test_start_step_continues_the_same_stream(root):
    recipe = root / "recipe.yaml"
    head = _json("--recipe", recipe, "--steps", "14")
    tail = _json("--recipe", recipe, "--steps", "10", "--start-step", "14")
    assert head["last_batch"] == 13 and tail["first_batch"] == 14 and tail["last_batch"] == 23
    assert head["state_after"]["batch"] == 14 and not head["ended"]


def test_usage_errors_exit_2(root):
    recipe = root / "recipe.yaml"
    assert "either a DATASET" in _run(code=2).output
    assert "not both" in _run(root / "web", "--recipe", recipe, code=2).output
    assert "--seq-len does not apply with --recipe" in _run("--recipe", recipe, "--seq-len", "8", code=2).output
    assert "--batch does not apply" in _run("--recipe", recipe, "--batch", "8", code=2).output
    assert "--strict applies to --recipe only" in _run(root / "web", "--strict", code=2).output
    _run("--recipe", root / "missing.yaml", code=2)


def test_bad_recipes_are_one_line_errors(root, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((RECIPE % "").replace("path: web", f"path: {root / 'nowhere'}"))
    r = _run("--recipe", bad, code=1)
    assert "source 'code'" in r.output and "no such directory" in r.output and "relative to" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    uneven = tmp_path / "uneven.yaml"
    text = (RECIPE % "").replace("{web: 0.5, math: 0.5}", "{web: 1, math: 1}")
    for name in ("web", "code", "math"):
        text = text.replace(f"path: {name}", f"path: {root / name}")
    uneven.write_text(text)
    r = _run("--recipe", uneven, "--strict", code=1)
    assert "sum to 2" in r.output and len(r.output.strip().splitlines()) == 1
    ok = _json("--recipe", uneven, "--steps", "3")
    assert any("normalized" in w for w in ok["warnings"])
    r = _run("--recipe", root / "recipe.yaml", "--world-size", "3", code=1)
    assert "not divisible by world_size 3" in r.output


def test_an_epoch_cap_ends_the_run_with_its_reason(root):
    capped = root / "capped.yaml"
    capped.write_text((RECIPE % ", epochs: 1").replace("tokens: 4000", "tokens: 40000"))
    r = _run("--recipe", capped, "--steps", "100000")
    assert "run ended: source 'math' runs out of data at global batch" in r.output
    assert "epochs: 1" in r.output
    data = _json("--recipe", capped, "--steps", "100000")
    assert data["ended"] and data["mixture"]["exhausted"]["source"] == "math"
    assert data["last_batch"] + 1 == data["mixture"]["exhausted"]["batch"]
