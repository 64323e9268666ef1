"""Train a tiny next-token model on shardkit shards, checkpointing so a SIGKILL at any moment resumes exactly.

    python examples/train_torch.py --data shards/ --ckpt-dir ckpt/ --steps 200 --workers 2 --log train.log

What makes the resume exact:
1. The batches are a pure function of (data, seq_len, seed, batch index): the checkpoint holds only the
   loader's small JSON state — `ds.state_after(item)` for a plain DataLoader (any worker count on resume),
   or the StatefulDataLoader's own `state_dict()` with `--stateful` (same worker count on resume).
2. The model, the optimizer (AdamW's moments and step count) and the RNG are saved with `torch.save`, and
   the maths is deterministic (`torch.use_deterministic_algorithms`, one thread), so the same batches give
   bit-identical losses.
3. A checkpoint is committed by atomically replacing `latest.json` (write a temp file, fsync, os.replace,
   fsync the directory); it names a weights file that was made durable before it. A crash leaves either
   the old checkpoint or the new one, never half of one.

Each step appends one JSON line to `--log` — step, batch index, a hash of the batch's input_ids, the loss
(a float's repr, so exact) — flushed and fsynced, so whatever was logged survives a SIGKILL. Steps after
the last checkpoint are trained and logged again on resume, with the same values.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from shardkit import Loader
from shardkit.format.atomic import atomic_file
from shardkit.torch import ShardkitIterableDataset

_CKPT_VERSION = 1
_LATEST = "latest.json"


class TinyLM(nn.Module):
    """Token + position embeddings, one pre-norm causal transformer block, a linear head."""

    def __init__(self, vocab: int, seq_len: int, dim: int = 64, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, t = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(t))
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, -1))
        x = x + self.mlp(self.ln2(x))
        return self.head(self.ln_f(x))


# -- durable files: shardkit.format.atomic writes temp, fsyncs, renames, fsyncs the directory ---------------
def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write `path` so that a crash leaves the old file or the new one."""
    with atomic_file(path) as f:
        write(f)


def save_checkpoint(ckpt_dir: Path, *, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    data_kind: str, data_state: dict[str, Any], meta: dict[str, Any]) -> None:
    """Weights first, then the JSON record that commits them; older weights are removed afterwards."""
    weights = f"weights-{step:08d}.pt"
    atomic_write(ckpt_dir / weights, lambda f: torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()}, f))
    record = {"version": _CKPT_VERSION, "step": step, "weights": weights, "meta": meta,
              "data_kind": data_kind, "data": data_state}
    text = json.dumps(record, allow_nan=False, sort_keys=True).encode()  # raises if the state is not JSON
    atomic_write(ckpt_dir / _LATEST, lambda f: f.write(text))
    for old in ckpt_dir.glob("weights-*.pt"):
        if old.name != weights:
            old.unlink()


def load_checkpoint(ckpt_dir: Path) -> dict[str, Any] | None:
    path = ckpt_dir / _LATEST
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("version") != _CKPT_VERSION:
        raise SystemExit(f"{path}: checkpoint version {record.get('version')!r}, expected {_CKPT_VERSION}")
    record["tensors"] = torch.load(ckpt_dir / record["weights"], weights_only=True)
    return record


class StepLog:
    """Appends one JSON line per step and makes it durable before training goes on."""

    def __init__(self, path: Path) -> None:
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, **fields: Any) -> None:
        self._f.write(json.dumps(fields) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def batch_hash(input_ids: torch.Tensor) -> str:
    return hashlib.blake2b(input_ids.contiguous().numpy().tobytes(), digest_size=16).hexdigest()


# -- training ---------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a shardkit dataset directory")
    p.add_argument("--ckpt-dir", required=True, type=Path, help="checkpoints go here; resumes if one exists")
    p.add_argument("--steps", type=int, required=True, help="total optimizer steps (including resumed ones)")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=8, help="rows per step")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--stateful", action="store_true",
                   help="torchdata StatefulDataLoader; its state_dict() is the checkpointed data state")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint after every N steps")
    p.add_argument("--log", required=True, type=Path, help="per-step log (JSON lines, appended)")
    p.add_argument("--seed", type=int, default=0, help="seeds the data order and the model init")
    p.add_argument("--vocab", type=int, default=None,
                   help="model vocabulary (default: the dataset tokenizer's vocab_size, else the dtype's range)")
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args(argv)
    if args.steps < 1 or args.ckpt_every < 1 or args.batch < 1 or args.workers < 0:
        p.error("--steps, --ckpt-every and --batch must be positive, --workers non-negative")
    return args


def default_vocab(loader: Loader) -> int:
    tokenizer = loader.dataset.tokenizer or {}
    if isinstance(tokenizer.get("vocab_size"), int):
        return tokenizer["vocab_size"]
    if loader.dataset.dtype.itemsize <= 2:
        return 1 << (8 * loader.dataset.dtype.itemsize)
    raise SystemExit(f"{loader.dataset.dtype} tokens and no tokenizer vocab_size in the manifest: pass --vocab")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    loader = Loader(args.data, seq_len=args.seq_len, batch_schedule=args.batch, seed=args.seed)
    vocab = args.vocab or default_vocab(loader)
    model = TinyLM(vocab, args.seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    ds = ShardkitIterableDataset(loader, token_dtype=torch.long)
    if args.stateful:
        from torchdata.stateful_dataloader import StatefulDataLoader  # only needed with --stateful

        dl: DataLoader = StatefulDataLoader(ds, batch_size=None, num_workers=args.workers)
    else:
        dl = DataLoader(ds, batch_size=None, num_workers=args.workers)
    data_kind = "stateful_dataloader" if args.stateful else "loader"
    meta = {"seq_len": args.seq_len, "batch": args.batch, "seed": args.seed, "vocab": vocab,
            "workers": args.workers}

    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    step = 0
    ckpt = load_checkpoint(args.ckpt_dir)
    rng_state = None
    if ckpt is not None:
        if ckpt["data_kind"] != data_kind:
            raise SystemExit(f"checkpoint holds a {ckpt['data_kind']} state but this run uses {data_kind}")
        for name in ("seq_len", "batch", "seed", "vocab", *(("workers",) if args.stateful else ())):
            if ckpt["meta"][name] != meta[name]:
                raise SystemExit(f"checkpoint was saved with {name}={ckpt['meta'][name]!r}, this run has "
                                 f"{meta[name]!r}: use the same value or a fresh --ckpt-dir")
        model.load_state_dict(ckpt["tensors"]["model"])
        optimizer.load_state_dict(ckpt["tensors"]["optimizer"])
        rng_state = ckpt["tensors"]["rng"]
        if args.stateful:
            dl.load_state_dict(ckpt["data"])  # type: ignore[attr-defined]
        else:
            ds.load_loader_state(ckpt["data"])
        step = ckpt["step"]
        print(f"resumed at step {step} from {args.ckpt_dir / _LATEST}", flush=True)

    log = StepLog(args.log)
    batches = iter(dl)  # creating the iterator draws worker seeds from the RNG, so restore it afterwards
    if rng_state is not None:
        torch.set_rng_state(rng_state)
    model.train()
    while step < args.steps:
        item = next(batches)
        if int(item["batch_index"]) != step:  # a constant batch size without micro-batches: batch b is step b
            raise SystemExit(f"step {step} received batch {int(item['batch_index'])}: the data state was not "
                             f"restored correctly; refusing to train on the wrong batches")
        logits = model(item["input_ids"])
        loss = F.cross_entropy(logits.reshape(-1, vocab), item["labels"].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        log.write(step=step, batch_index=int(item["batch_index"]), hash=batch_hash(item["input_ids"]),
                  loss=loss.item())
        step += 1
        if step % args.ckpt_every == 0 or step == args.steps:
            data_state = dl.state_dict() if args.stateful else ds.state_after(item)  # type: ignore[attr-defined]
            save_checkpoint(args.ckpt_dir, step=step, model=model, optimizer=optimizer, data_kind=data_kind,
                            data_state=data_state, meta=meta)
    log.close()
    print(f"done: {step} steps", flush=True)


if __name__ == "__main__":
    main()
