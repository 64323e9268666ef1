"""The docs are true: every ```bash and ```python block of README.md and docs/quickstart.md runs.

Each document gets a working directory holding what its examples assume (a small JSONL.zst corpus under
data/, the real GPT-2 tokenizer.json at path/to/tokenizer.json and gpt2/, a local Hugging Face cache with
`gpt2`, a recipe), and the examples run at tiny sizes: the substitutions below only shrink numbers and
point at that directory. A command that cannot run here is skipped by an explicit marker in SKIPS, each
with its reason, and every marker must still match a line (a stale marker fails the test).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from support.hf_layout import hub_cache_tokenizer
from support.paths import CORPUS, GPT2_JSON

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/quickstart.md"]

# (pattern, why this command does not run in the suite)
SKIPS = [
    (r"^make (demo|test)\b", "sets up .venv and runs the suite itself: timed from a fresh clone (README table)"),
    (r"\bpip install\b", "installs packages"),
    (r"s3://", "needs an S3 endpoint: tests/remote runs pack, stream, verify, inspect and show against moto"),
    (r"--executor ray", "starts a Ray instance: tests/integration/pack/test_ray_executor.py"),
]

# tiny sizes and local stand-ins (text substitutions on the documented command or code)
SUBSTITUTIONS = [
    ("--workers 8", "--workers 2"),
    ("--num-tasks 64", "--num-tasks 2"),
    ("--steps 1000", "--steps 5"),
    ("--seq-len 2048", "--seq-len 128"),
    ("--batch 256", "--batch 16"),
    ("--batch 64", "--batch 16"),
    ("/megatron/web_text_document", "shards/shard-00000"),
    ("web/web_text_document", "web/shard-00000"),
    ("--megatron-samples 1000000", "--megatron-samples 2000"),
    ("--seq-len 4096", "--seq-len 128"),
    ("--batch 512", "--batch 16"),
    ("--consumed-samples 51200", "--consumed-samples 64"),
    ("seq_len=2048", "seq_len=128"),
    ("num_workers=4", "num_workers=2"),
]
LOOP = re.compile(r"^(\s*)for (.+) in (enumerate\(\w+\)|loader|dl|mix):", re.M)

pytestmark = pytest.mark.skipif(not GPT2_JSON.exists(), reason="needs ../shared/data (the GPT-2 tokenizer)")


def blocks(doc: str) -> list[tuple[str, str]]:
    text = (ROOT / doc).read_text()
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(bash|python)\n(.*?)^```", text, re.M | re.S)]


def _strip_comment(line: str) -> str:
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(block: str) -> list[str]:
    out, pending = [], ""
    for raw in block.splitlines():
        line = _strip_comment(raw)
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            out.append(line)
    return out


def shrink(text: str) -> str:
    for a, b in SUBSTITUTIONS:
        text = text.replace(a, b)
    return text


def workdir(base: Path) -> Path:
    """What the examples assume exists: data/ (JSONL.zst, books), tokenizers, an HF cache, a recipe."""
    w = base / "work"
    (w / "data" / "web").mkdir(parents=True)
    (w / "data" / "books").mkdir()
    text = (CORPUS / "tinyshakespeare" / "input.txt").read_text()
    cctx = zstandard.ZstdCompressor()
    for k in range(3):
        part = text[k * 120_000:(k + 1) * 120_000]
        lines = "".join(json.dumps({"text": part[i:i + 3000]}) + "\n" for i in range(0, len(part), 3000))
        (w / "data" / ("web" if k else "") / f"part-{k}.jsonl.zst").write_bytes(cctx.compress(lines.encode()))
    (w / "data" / "books" / "sonnets.txt").write_text(text[400_000:440_000])
    for d in ("path/to", "gpt2"):
        (w / d).mkdir(parents=True)
        (w / d / "tokenizer.json").symlink_to(GPT2_JSON)
    hub_cache_tokenizer(base / "hub", "gpt2", GPT2_JSON)
    (w / "recipe.yaml").write_text("seed: 1\nseq_len: 128\nphases:\n  - name: all\n    tokens: 200K\n"
                                   "    batch: 8\n    mix: {main: 1.0}\nsources:\n  main: {path: shards}\n")
    return w


def run_bash(line: str, cwd: Path, env: dict[str, str], seen: set[str]) -> None:
    for pattern, _why in SKIPS:
        if re.search(pattern, line):
            seen.add(pattern)
            return
    line = shrink(line)
    tasks = int(re.search(r"--num-tasks (\d+)", line).group(1)) if "$I" in line else 1  # type: ignore[union-attr]
    for i in range(tasks):  # a job-array line runs once per task
        cmd = line.replace("$I", str(i))
        r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{cmd!r} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"


def run_python(code: str, namespace: dict, cwd: Path) -> None:
    code = LOOP.sub(lambda m: f"{m.group(1)}for {m.group(2)} in _tiny({m.group(3)}):", shrink(code))
    old = os.getcwd()
    os.chdir(cwd)
    try:
        exec(compile(code, "<doc block>", "exec"), namespace)  # noqa: S102 - the point of the test
    finally:
        os.chdir(old)


@pytest.mark.parametrize("doc", DOCS)
def test_every_code_block_runs(doc, tmp_path, monkeypatch):
    w = workdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_CACHE": str(tmp_path / "hub"), "SHARDKIT_CACHE_DIR": str(tmp_path / "cache")}
    namespace = {"rank": 0, "world": 1, "ckpt": {}, "train_step": lambda *a: None, "save": lambda *a: None,
                 "_tiny": lambda it: itertools.islice(it, 3), "__name__": "__doc_block__"}
    seen: set[str] = set()
    found = blocks(doc)
    assert found, f"{doc} has no code blocks"
    for kind, body in found:
        if kind == "bash":
            for line in commands(body):
                run_bash(line, w, env, seen)
        else:
            run_python(body, namespace, w)
    if doc == "README.md":  # every marker is still needed by some line of the documents
        quick = "\n".join(b for d in DOCS for k, b in blocks(d) if k == "bash")
        stale = [p for p, _ in SKIPS if not re.search(p, quick, re.M)]
        assert not stale, f"skip markers that match nothing any more: {stale}"
