"""Real multi-process DDP (gloo, loopback): train on 4 ranks, SIGKILL after a checkpoint, resume on 2 ranks.

The 4 ranks are spawned by `python -m examples.train_ddp --nproc 4`, the 2 by torchrun. Each rank logs the
sample ids of its rows and a digest of each row's tokens for every step. Checked: the steps that count
(the killed run's up to its checkpoint, the resumed run's after it) saw exactly the single-process global
stream — every global batch in order, each sample once — across a batch-size ramp and micro-batches; the
redone steps saw the same samples on 2 ranks as on 4; the rows hold those samples' tokens; every rank
ends with the same parameters, and they match a single-process run on the global batches.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardkit import Loader, Ramp, open_dataset  # noqa: E402
from shardkit.writer import write_dataset  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_ddp.py"
SEQ, VOCAB, BATCH, RAMP, MICRO, SEED = 16, 512, 16, (8, 8, 120), 2, 3
STEPS, CKPT_EVERY, STALL = 24, 4, 13  # checkpoints after steps 4, 8, 12; the 4-rank run stalls after step 13
TIMEOUT = 90.0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(7)
    docs = [rng.integers(0, VOCAB, size=int(rng.integers(5, 100)), dtype=np.uint16) for _ in range(130)]
    path = tmp_path_factory.mktemp("ddp") / "ds"
    write_dataset(path, docs, max_tokens_per_shard=800, checksum_block_size=4096)
    assert len(list(path.glob("*.bin"))) >= 6  # windows cross shard boundaries
    return path


def _args(data: Path, run: Path, logs: str) -> list[str]:
    return ["--data", str(data), "--ckpt-dir", str(run / "ckpt"), "--log-dir", str(run / logs),
            "--steps", str(STEPS), "--seq-len", str(SEQ), "--batch", str(BATCH), "--ramp", *map(str, RAMP),
            "--micro-batch", str(MICRO), "--ckpt-every", str(CKPT_EVERY), "--vocab", str(VOCAB),
            "--seed", str(SEED), "--lr", "1e-2"]


def _start(cmd: list[str], out: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    with open(out, "wb") as f:  # its own session: the test kills the launcher and every rank at once
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]  # a line being written is skipped


def _rank_logs(directory: Path, world: int) -> list[list[dict]]:
    return [_read(directory / f"rank{r}-of-{world}.jsonl") for r in range(world)]


def _row_digest(row: np.ndarray) -> str:
    return hashlib.blake2b(row.astype(np.int64).tobytes(), digest_size=8).hexdigest()


@pytest.fixture()
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _load_example():
    spec = importlib.util.spec_from_file_location("train_ddp_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _single_process_model(data: Path):
    """The same model trained in one process on whole global batches (no DDP, no micro-batches)."""
    ex = _load_example()
    model = ex.build_model(VOCAB, SEED)
    optimizer = ex.build_optimizer(model, 1e-2)
    loader = Loader(data, seq_len=SEQ, batch_schedule=Ramp(*RAMP[:2], RAMP[2], final=BATCH), seed=SEED,
                    rank=0, world_size=1)
    for step, batch in zip(range(STEPS), loader):
        item = {"input_ids": torch.from_numpy(batch["input_ids"].astype(np.int64)),
                "labels": torch.from_numpy(batch["labels"].astype(np.int64)), "num_micro": 1}
        assert batch["batch_index"] == step
        ex.micro_loss(model, item, VOCAB).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return model


def test_ddp_4_ranks_killed_resume_on_2_ranks(data, tmp_path, procs):
    t0 = time.monotonic()
    # -- 4 ranks, spawned by the script itself; stalls after step 13 (checkpoint at 12), then SIGKILL ------------
    procs.append(_start([sys.executable, "-m", "examples.train_ddp", "--nproc", "4",
                         *_args(data, tmp_path, "logs4"), "--stall-after-step", str(STALL)], tmp_path / "out4.txt"))
    deadline = time.monotonic() + TIMEOUT
    while not all(log and log[-1]["step"] == STALL for log in _rank_logs(tmp_path / "logs4", 4)):
        if procs[0].poll() is not None:
            pytest.fail(f"4-rank run exited ({procs[0].returncode}):\n{(tmp_path / 'out4.txt').read_text()}")
        if time.monotonic() > deadline:
            pytest.fail(f"4-rank run did not reach step {STALL} in {TIMEOUT}s")
        time.sleep(0.05)
    committed = json.loads((tmp_path / "ckpt" / "latest.json").read_text())
    assert committed["step"] == 12 and committed["world_size"] == 4
    assert committed["data"]["batch"] == 12 and committed["data"]["micro"] == 0  # a step boundary
    os.killpg(procs[0].pid, signal.SIGKILL)
    procs[0].wait(timeout=TIMEOUT)
    t1 = time.monotonic()

    # -- 2 ranks under torchrun, resuming from the 4-rank checkpoint ---------------------------------------------
    procs.append(_start([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                         str(SCRIPT), *_args(data, tmp_path, "logs2")], tmp_path / "out2.txt"))
    assert procs[1].wait(timeout=TIMEOUT) == 0, (tmp_path / "out2.txt").read_text()
    out2 = (tmp_path / "out2.txt").read_text()
    t2 = time.monotonic()
    assert "resumed at step 12 on 2 ranks (saved on 4)" in out2, out2

    # -- the reference: the single-process global stream ------------------------------------------------------
    ref = Loader(data, seq_len=SEQ, batch_schedule=Ramp(*RAMP[:2], RAMP[2], final=BATCH), seed=SEED,
                 rank=0, world_size=1)
    expected = {b: ref.global_sample_ids(b).tolist() for b in range(STEPS)}
    sizes = [len(expected[b]) for b in range(STEPS)]
    assert sizes[0] == RAMP[0] and sizes[-1] == BATCH and len(set(sizes)) == 2  # the ramp is crossed (at 15)
    ds = open_dataset(data)
    flat = ds.read_tokens(0, ds.num_tokens)

    logs4, logs2 = _rank_logs(tmp_path / "logs4", 4), _rank_logs(tmp_path / "logs2", 2)
    steps4 = [{e["step"]: e for e in log} for log in logs4]
    steps2 = [{e["step"]: e for e in log if "final" not in e} for log in logs2]
    for r, log in enumerate(logs4):
        assert [e["step"] for e in log] == list(range(STALL + 1)), f"4-rank run, rank {r}"
    for r, log in enumerate(logs2):
        assert [e["step"] for e in log] == [*range(12, STEPS), STEPS] and log[-1]["final"], f"2-rank run, rank {r}"

    def seen(per_rank: list[dict[int, dict]], step: int) -> list[int]:
        """The global batch as the ranks saw it: rank 0's rows, then rank 1's, …"""
        out = []
        for r, by_step in enumerate(per_rank):
            e = by_step[step]
            assert (e["rank"], e["world"], e["global_batch"]) == (r, len(per_rank), sizes[step])
            assert len(e["ids"]) == sizes[step] // len(per_rank)
            assert e["rows"] == [_row_digest(flat[i * SEQ:i * SEQ + SEQ + 1]) for i in e["ids"]], \
                f"step {step}, rank {r}: the rows are not the tokens of the logged sample ids"
            out += e["ids"]
        return out

    history = [seen(steps4, b) for b in range(12)] + [seen(steps2, b) for b in range(12, STEPS)]
    for b, ids in enumerate(history):
        assert ids == expected[b], f"step {b}: the ranks' rows are not global batch {b} in order"
    flat_ids = [i for ids in history for i in ids]
    assert len(flat_ids) == len(set(flat_ids)) == sum(sizes)  # one epoch: every sample exactly once
    assert sum(sizes) < ref.num_samples
    for b in (12, 13):  # trained by the killed run too (after its checkpoint), then redone on 2 ranks
        assert seen(steps4, b) == seen(steps2, b) == expected[b]

    # -- DDP kept the replicas identical, and equal to training on the global batch in one process -------------
    finals = {log[-1]["params"] for log in logs2}
    assert len(finals) == 1, f"ranks ended with different parameters: {finals}"
    weights = torch.load(tmp_path / "ckpt" / f"weights-{STEPS:08d}.pt", weights_only=True)["model"]
    single = _single_process_model(data).state_dict()
    for name, value in single.items():  # float rounding of the reductions only (measured: 2.4e-6 at most)
        torch.testing.assert_close(weights[name], value, rtol=1e-4, atol=1e-5, msg=f"parameter {name}")
    assert json.loads((tmp_path / "ckpt" / "latest.json").read_text())["step"] == STEPS
    print(f"ddp elastic test: 4 ranks {t1 - t0:.1f}s, 2 ranks {t2 - t1:.1f}s, checks {time.monotonic() - t2:.1f}s")
