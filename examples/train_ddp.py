"""Data-parallel training (DistributedDataParallel, gloo, CPU) on shardkit shards, resumable on another world size.

    torchrun --nproc-per-node 4 examples/train_ddp.py --data shards/ --ckpt-dir ckpt/ --log-dir logs/ --steps 200
    python -m examples.train_ddp --nproc 2 --data shards/ --ckpt-dir ckpt/ --log-dir logs/ --steps 400

The second line (from the repository root; `python examples/train_ddp.py --nproc 2 …` works from anywhere)
starts 2 local ranks itself, on loopback, and resumes the 4-rank run's checkpoint on them.

Why a resume on another world size is exact:
1. Each rank builds the same `Loader` after `init_process_group`, without passing rank or world size: the
   loader takes them from torch.distributed and reads its contiguous slice of every global batch, so the
   ranks together read global batch `b` — the same samples for any world size that divides it.
2. The loader state is rank-independent (DESIGN §6): the next global batch index plus the stream's
   identity. Rank 0 saves it with the model and optimizer; on resume every rank loads the same state and
   takes its slice of the next batch in the *new* world. The batch must divide over the new ranks (and
   their share over `--micro-batch`); the loader refuses the resume otherwise.
3. The gradient is the mean over the global batch for any world size: each rank averages the loss over
   its rows and micro-batches (`loss / num_micro`, accumulated under `no_sync`), and DDP averages over
   ranks. So 4 ranks and 2 ranks train the same model, up to float rounding of the reductions.
4. A checkpoint is committed by atomically replacing `latest.json` after the weights file it names; the
   model and AdamW state are replicated, so rank 0 writes them alone. The checkpoint is taken at a step
   boundary, never mid-step (a mid-step loader state is bound to the world size it was saved on).

Each rank appends one JSON line per step to `--log-dir/rank<r>-of-<W>.jsonl`: the global batch, the
sample ids of its rows (from the loader's pure sample order) with a digest of each row's tokens (so a
test can check the rows are those samples), the local loss; and a final line with a digest of its
model parameters, which must be identical on every rank.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from shardkit import Loader, Ramp
from shardkit.format.atomic import atomic_file, atomic_write_bytes
from shardkit.torch import ShardkitIterableDataset

_CKPT_VERSION = 1
_LATEST = "latest.json"


class BigramMLP(nn.Module):
    """Next token from the current one: embedding → MLP → vocabulary (small enough for a CPU test)."""

    def __init__(self, vocab: int, dim: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Embedding(vocab, dim), nn.Linear(dim, 2 * dim), nn.GELU(),
                                 nn.Linear(2 * dim, vocab))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.net(ids)


def build_model(vocab: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return BigramMLP(vocab)


def build_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)


def micro_loss(model: nn.Module, item: dict[str, Any], vocab: int) -> torch.Tensor:
    """This micro-batch's share of the step's loss: its mean over rows, divided by the micro-batch count."""
    logits = model(item["input_ids"])
    loss = F.cross_entropy(logits.reshape(-1, vocab), item["labels"].reshape(-1))
    return loss / int(item["num_micro"])


def schedule(args: argparse.Namespace) -> Ramp | int:
    if not args.ramp:
        return args.batch
    start, increment, ramp_samples = args.ramp
    return Ramp(start=start, increment=increment, ramp_samples=ramp_samples, final=args.batch)


def params_digest(model: nn.Module) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def row_digests(item: dict[str, Any]) -> list[str]:
    """A digest of each row's seq_len + 1 tokens (input_ids and the last label), as int64."""
    ids, labels = item["input_ids"], item["labels"]
    rows = torch.cat([ids, labels[:, -1:]], dim=1).to(torch.int64).numpy()
    return [hashlib.blake2b(r.tobytes(), digest_size=8).hexdigest() for r in rows]


def item_sample_ids(loader: Loader, item: dict[str, Any]) -> list[int]:
    """Sample ids of this rank's rows of `item`: its slice of the global batch (a pure function)."""
    b, k = int(item["batch_index"]), int(item["micro_index"])
    rows = int(item["input_ids"].shape[0])
    per_rank = int(item["global_batch_size"]) // loader.world_size
    lo = loader.rank * per_rank + k * rows
    return loader.global_sample_ids(b)[lo:lo + rows].tolist()


# -- checkpoints --------------------------------------------------------------------------------------------
def save_checkpoint(ckpt_dir: Path, *, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    data_state: dict[str, Any], meta: dict[str, Any]) -> None:
    """Rank 0 only: weights first, then the JSON record that commits them; older weights removed after."""
    weights = f"weights-{step:08d}.pt"
    with atomic_file(ckpt_dir / weights) as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, f)
    record = {"version": _CKPT_VERSION, "step": step, "weights": weights, "meta": meta, "data": data_state,
              "world_size": dist.get_world_size()}  # informational: any world size that divides may resume
    atomic_write_bytes(ckpt_dir / _LATEST, json.dumps(record, allow_nan=False, sort_keys=True).encode())
    for old in ckpt_dir.glob("weights-*.pt"):
        if old.name != weights:
            old.unlink()


def load_checkpoint(ckpt_dir: Path, meta: dict[str, Any]) -> dict[str, Any] | None:
    path = ckpt_dir / _LATEST
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("version") != _CKPT_VERSION:
        raise SystemExit(f"{path}: checkpoint version {record.get('version')!r}, expected {_CKPT_VERSION}")
    for name, value in meta.items():
        if record["meta"].get(name) != value:
            raise SystemExit(f"{path} was saved with {name}={record['meta'].get(name)!r}, this run has "
                             f"{value!r}: use the same value or a fresh --ckpt-dir")
    record["tensors"] = torch.load(ckpt_dir / record["weights"], weights_only=True)
    return record


# -- one rank -------------------------------------------------------------------------------------------------
def train(args: argparse.Namespace) -> None:
    """The body of every rank; the process group is initialised."""
    torch.set_num_threads(1)  # these CPU kernels are deterministic on one thread (use_deterministic_algorithms
    # would import torch._inductor: +2.5 s per rank)
    loader = Loader(args.data, seq_len=args.seq_len, batch_schedule=schedule(args), seed=args.seed,
                    micro_batch_size=args.micro_batch)  # rank and world size: from torch.distributed
    rank, world = loader.rank, loader.world_size
    if (rank, world) != (dist.get_rank(), dist.get_world_size()):
        raise SystemExit(f"the loader reads rank {rank} of {world}, the process group says "
                         f"{dist.get_rank()} of {dist.get_world_size()}")
    meta = {"seq_len": args.seq_len, "batch": args.batch, "ramp": args.ramp, "micro_batch": args.micro_batch,
            "seed": args.seed, "vocab": args.vocab, "lr": args.lr}
    model = build_model(args.vocab, args.seed)
    optimizer = build_optimizer(model, args.lr)
    ds = ShardkitIterableDataset(loader, token_dtype=torch.long)
    step = 0
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt = load_checkpoint(args.ckpt_dir, meta)
    if ckpt is not None:
        model.load_state_dict(ckpt["tensors"]["model"])
        optimizer.load_state_dict(ckpt["tensors"]["optimizer"])
        ds.load_loader_state(ckpt["data"])  # rank-independent; refused if the batch does not divide
        step = ckpt["step"]
        if rank == 0:
            print(f"resumed at step {step} on {world} ranks (saved on {ckpt['world_size']})", flush=True)
    ddp = DDP(model)  # broadcasts rank 0's parameters (identical anyway)
    dl = DataLoader(ds, batch_size=None, num_workers=args.workers)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    log = open(args.log_dir / f"rank{rank}-of-{world}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
    items = iter(dl)
    ddp.train()
    while step < args.steps:
        ids: list[int] = []
        digests: list[str] = []
        total = 0.0
        while True:
            item = next(items)
            if int(item["batch_index"]) != step:
                raise SystemExit(f"rank {rank}: step {step} received batch {int(item['batch_index'])}")
            last = int(item["micro_index"]) == int(item["num_micro"]) - 1
            if last:
                loss = micro_loss(ddp, item, args.vocab)
                loss.backward()  # the gradient all-reduce happens here
            else:
                with ddp.no_sync():
                    loss = micro_loss(ddp, item, args.vocab)
                    loss.backward()
            total += loss.item()
            ids += item_sample_ids(loader, item)
            digests += row_digests(item)
            if last:
                break
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        log.write(json.dumps({"step": step, "rank": rank, "world": world,
                              "global_batch": int(item["global_batch_size"]), "ids": ids, "rows": digests,
                              "loss": total}) + "\n")
        log.flush()
        step += 1
        if rank == 0 and (step % args.ckpt_every == 0 or step == args.steps):
            save_checkpoint(args.ckpt_dir, step=step, model=model, optimizer=optimizer,
                            data_state=ds.state_after(item), meta=meta)
        if args.stall_after_step is not None and step - 1 == args.stall_after_step:
            log.close()
            while True:  # for tests: stop making progress here; the test kills the job
                time.sleep(1)
    digest = params_digest(model)
    log.write(json.dumps({"final": True, "step": step, "rank": rank, "world": world, "params": digest}) + "\n")
    log.close()
    mine = torch.frombuffer(bytearray(bytes.fromhex(digest)), dtype=torch.uint8)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    if any(not torch.equal(g, mine) for g in gathered):
        raise SystemExit(f"rank {rank}: model parameters differ across ranks: "
                         f"{[bytes(g.tolist()).hex() for g in gathered]}")
    if rank == 0:
        print(f"done: {step} steps on {world} ranks, parameters {digest}", flush=True)


def _spawned_rank(local_rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every rank on this machine: loopback
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=local_rank,
                            world_size=args.nproc)
    try:
        train(args)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a shardkit dataset directory")
    p.add_argument("--ckpt-dir", required=True, type=Path, help="checkpoints go here; resumes if one exists")
    p.add_argument("--log-dir", required=True, type=Path, help="per-rank step logs (JSON lines, appended)")
    p.add_argument("--steps", type=int, required=True, help="total optimizer steps (global batches)")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=16, help="global batch size (samples), the final one of a ramp")
    p.add_argument("--ramp", type=int, nargs=3, metavar=("START", "INCREMENT", "RAMP_SAMPLES"),
                   help="Megatron-style batch-size ramp up to --batch")
    p.add_argument("--micro-batch", type=int, default=None, help="rows per micro-batch (gradient accumulation)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes per rank")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint after every N steps")
    p.add_argument("--seed", type=int, default=0, help="seeds the data order and the model init")
    p.add_argument("--vocab", type=int, default=65536, help="model vocabulary (token ids must be below it)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--nproc", type=int, default=None,
                   help="spawn this many local ranks (without torchrun); under torchrun leave it out")
    p.add_argument("--stall-after-step", type=int, default=None, help=argparse.SUPPRESS)  # tests: then SIGKILL
    args = p.parse_args(argv)
    if min(args.steps, args.ckpt_every, args.batch) < 1 or args.workers < 0 or (args.nproc or 1) < 1:
        p.error("--steps, --ckpt-every, --batch and --nproc must be positive, --workers non-negative")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.nproc is not None:  # the launcher: start the ranks, rendezvous on a loopback port
        # Forked ranks share the launcher's imports (torch, and torch._dynamo, which the first optimizer
        # construction imports: ~2 s per process otherwise). Nothing has run a torch op or started a thread
        # here yet, so forking is safe; other platforms spawn.
        method = "fork" if sys.platform == "linux" else "spawn"
        if method == "fork":
            import torch._dynamo  # noqa: F401
        mp.start_processes(_spawned_rank, args=(args, _free_port()), nprocs=args.nproc, join=True,
                           start_method=method)
        return
    if "WORLD_SIZE" in os.environ:  # torchrun set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
        dist.init_process_group("gloo")
        try:
            train(args)
        finally:
            dist.destroy_process_group()
        return
    args.nproc = 1
    _spawned_rank(0, args, _free_port())


if __name__ == "__main__":
    main()
