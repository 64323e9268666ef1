"""`shardkit explain` as a user runs it: a real corpus packed with the real GPT-2 tokenizer, explained in a
subprocess, checked against the rows the loader delivers and the text of the documents it names."""

import json
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner
from support.cli import shardkit_cmd
from support.paths import CORPUS, GPT2_JSON

from cli.main import cli
from shardkit.loader import Loader
from shardkit.tokenizers import load_tokenizer

pytestmark = pytest.mark.skipif(not GPT2_JSON.exists(), reason="needs ../shared/data (the GPT-2 tokenizer)")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("explain-cli")
    text = (CORPUS / "tinyshakespeare" / "input.txt").read_text()[:120_000]
    src = root / "plays.jsonl"
    src.write_text("".join(json.dumps({"text": text[i:i + 2000]}) + "\n" for i in range(0, len(text), 2000)))
    (root / "tokenizer.json").symlink_to(GPT2_JSON)
    out = root / "ds"
    r = subprocess.run([*shardkit_cmd(), "pack", str(src), "-o", str(out), "-t", str(root / "tokenizer.json"),
                        "--shard-size", "16KiB"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out, root / "tokenizer.json"


def _run(*args):
    r = subprocess.run([*shardkit_cmd(), "explain", *map(str, args)], capture_output=True, text=True)
    return r


def test_explain_json_matches_the_loader_and_decodes_the_text(ds):
    path, tok = ds
    r = _run(path, "--step", 123456789, "--seq-len", 64, "--batch", 8, "--world-size", 2, "--rank", 1,
             "--tokenizer", tok, "--preview-tokens", 10, "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["step"] == 123456789 and len(got["rows"]) == 4
    loader = Loader(path, seq_len=64, batch_schedule=8, world_size=2, rank=1, readahead=False)
    loader.load_state_dict(loader.state_at(123456789))
    item = next(iter(loader))
    for i, row in enumerate(got["rows"]):
        parts = [np.asarray(loader.dataset.doc(p["doc"]))[p["start"]:p["stop"]] for p in row["docs"]]
        np.testing.assert_array_equal(np.concatenate(parts)[:-1], item["input_ids"][i])
    gpt2 = load_tokenizer(str(tok))
    first = got["rows"][0]
    assert first["preview"] == gpt2.decode(item["input_ids"][0][:10])
    assert first["preview"].strip()  # real text, decoded


def test_explain_text_and_doc_inverse(ds):
    path, tok = ds
    r = _run(path, "--step", 7, "--seq-len", 64, "--batch", 4, "--rank", 0, "--row", 2, "--tokenizer", tok)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("step 7: phase 'main', seq_len 64, global batch 4")
    assert lines[1].startswith("rank 0 micro 0 row 2: data, sample ")
    doc = int(lines[2].split()[1].replace(",", ""))
    assert any(line.startswith("    text: ") for line in lines)
    inv = _run(path, "--doc", doc, "--seq-len", 64, "--batch", 4, "--json")
    assert inv.returncode == 0, inv.stderr
    steps = json.loads(inv.stdout)["sightings"]
    assert any(s["step"] == 7 and s["global_row"] == 2 for s in steps)


def test_explain_usage_and_errors(ds):
    path, _ = ds
    r = CliRunner().invoke(cli, ["explain", str(path)])
    assert r.exit_code == 2 and "--step" in r.output
    r = CliRunner().invoke(cli, ["explain", str(path), "--step", "1", "--doc", "3"])
    assert r.exit_code == 2
    r = CliRunner().invoke(cli, ["explain", str(path), "--step", "0", "--row", "1"])
    assert r.exit_code == 1 and r.output.startswith("Error: row needs rank")
    r = CliRunner().invoke(cli, ["explain", str(path), "--step", "10", "--seq-len", "64", "--max-epochs", "1",
                                 "--batch", "4000"])
    assert r.exit_code == 1 and "past the end" in r.output and "Traceback" not in r.output


def test_explain_and_stream_take_skips(ds):
    path, _ = ds
    r = CliRunner().invoke(cli, ["explain", str(path), "--step", "5", "--seq-len", "64", "--batch", "4",
                                 "--skip", "4,6", "--preview-tokens", "0"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1].startswith("SKIPPED: in skip range [4, 6]")
    r = CliRunner().invoke(cli, ["stream", str(path), "--seq-len", "64", "--batch", "4", "--steps", "3",
                                 "--skip", "1,2", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["first_batch"], out["last_batch"], out["batches"]) == (0, 4, 3)
    assert out["state_after"]["skips"] == [[1, 2]]
    r = CliRunner().invoke(cli, ["stream", str(path), "--skip", "1-2"])
    assert r.exit_code == 2 and "FIRST,LAST" in r.output
