"""`shardkit stream --recipe` prints the accounting table; its JSON equals the library's and adds up."""

import json

import pytest
from click.testing import CliRunner
from support.mixtures import make_sources

from cli.main import cli
from shardkit.loader import MixtureLoader

RECIPE = """\
seed: 5
seq_len: 16
skip: [[2, 3]]
phases:
  - {name: warmup, tokens: 2000, batch: 8, mix: {web: 0.6, code: 0.3, math: 0.1}}
  - {name: long, tokens: 4000, batch: 4, seq_len: 32, mix: {web: 0.5, math: 0.5}}
sources:
  web: {path: web}
  code: {path: code}
  math: {path: math}
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    d = tmp_path_factory.mktemp("acli")
    make_sources(d)
    (d / "recipe.yaml").write_text(RECIPE)
    return d


def test_stream_recipe_prints_and_reports_accounting(root):
    r = CliRunner().invoke(cli, ["stream", "--recipe", str(root / "recipe.yaml"), "--steps", "20", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    acct = out["accounting"]
    loader = MixtureLoader(root / "recipe.yaml")
    assert acct == loader.accounting(out["last_batch"] + 1)
    assert acct["skips"] == [[2, 3]] and out["batches"] == 20
    assert acct["tokens"] == out["tokens"]  # what the stream counted as delivered, all of it
    r = CliRunner().invoke(cli, ["stream", "--recipe", str(root / "recipe.yaml"), "--steps", "20"])
    assert r.exit_code == 0, r.output
    text = r.output
    assert "accounting (all ranks) against the recipe:" in text
    head = next(line for line in text.splitlines() if line.strip().startswith("phase  "))
    assert head.split() == ["phase", "source", "tokens", "target", "weight", "achieved", "error", "skipped"]
    assert any(line.split()[:2] == ["warmup", "web"] for line in text.splitlines())


def test_stream_recipe_writes_an_accounting_plot(root, tmp_path):
    png = tmp_path / "acct.png"
    r = CliRunner().invoke(cli, ["stream", "--recipe", str(root / "recipe.yaml"), "--steps", "30", "--plot", str(png)])
    assert r.exit_code == 0, r.output
    assert f"accounting plot: {png}" in r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    r = CliRunner().invoke(cli, ["stream", "--recipe", str(root / "recipe.yaml"), "--steps", "5", "--plot",
                                 str(tmp_path / "acct.jpg")])
    assert r.exit_code != 0 and "write a .png file" in r.output and "Traceback" not in r.output


def test_accounting_series_is_the_accounting_at_each_step(root):
    from shardkit.engine.accounting_plot import accounting_series

    loader = MixtureLoader(root / "recipe.yaml")
    series = accounting_series(loader, 30, points=7)
    assert series["steps"][0] == 0 and series["steps"][-1] == 30 and len(series["steps"]) == 7
    for i, b in enumerate(series["steps"]):
        acct = loader.accounting(b)
        for name, s in series["sources"].items():
            assert s["tokens"][i] == acct["sources"][name]["tokens"]
            assert s["error_tokens"][i] == acct["sources"][name]["error_tokens"]
            want = sum(p["sources"][name]["expected_tokens"] for p in acct["phases"] if name in p["sources"])
            assert abs(s["expected_tokens"][i] - want) < 0.11
