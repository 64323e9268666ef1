"""`ShardkitDataLoader`: a torch DataLoader whose workers write groups of batches into shared memory
the main process allocated once, instead of torch's one new shared-memory segment per tensor.

torch moves every tensor a worker yields into a fresh shared-memory segment and hands its file
descriptor over a socket; that costs more than building a small batch (batch 8 × 2048 tokens through
`DataLoader(ShardkitIterableDataset(...), num_workers=2)`: about 11 M tokens/s here). Here:

* each worker packs `group` consecutive items into one array per field, written straight into a slot of
  a ring it owns inside one `multiprocessing.shared_memory` segment (created by the main process; the
  resource tracker removes it even if the main process is killed);
* only a small dict (slot, layout) travels through the DataLoader's queue, whatever the number of items:
  each item's row counts and numeric scalars are written into the slot with its arrays;
* the main process copies the group out of the slot into private memory (pinned memory with
  `pin_memory=True` and an accelerator), marks the slot released in a shared counter, and cuts the group
  into items as views. A worker waits before reusing a slot that is not released; with torch's bounded
  prefetch and two spare slots this does not happen in practice.

Items of one group may differ in shape (a mixture's phases change seq_len and batch size): the group is
stored as runs of items of one shape, each run one array per field.

Worker w of k builds groups w, w + k, … counted from the start point; DataLoader collects results from
its workers round-robin, so items arrive in order for any worker count. The position is the loader's: handing out an item moves the wrapped loader past it, so `state_dict()`
(the loader's) is the state after the last item handed out, resumes with any worker count (or none), and
restoring the loader before or after wrapping it is the same. The loader crosses to the workers pickled
(its configuration and position; it reopens its files there), so every multiprocessing start method works.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import replace
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..errors import ConfigError, MissingDependencyError
from ..loader import Loader, MixtureLoader

try:
    import torch
    from torch.utils.data import DataLoader, IterableDataset
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise MissingDependencyError("torch", extra="torch", purpose="shardkit.torch") from e

from .torch_dataset import _numpy_dtype, _worker, to_torch

__all__ = ["ShardkitDataLoader"]

_GROUP_BYTES = 2 << 20  # a group's token array is about this big: per-transfer costs are paid per ~2 MiB
_ALIGN = 64
_FORBIDDEN = ("batch_size", "shuffle", "sampler", "batch_sampler", "collate_fn", "drop_last")


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class _Layout:
    """The most bytes a slot can need: every field of `group` of the largest items, each run aligned."""

    def __init__(self, loader: Loader | MixtureLoader, token_dtype: np.dtype, group: int) -> None:
        packed = loader.packs_rows
        f = loader.config.fields.for_packed_rows if packed else loader.config.fields
        rows, width = loader.max_item_shape()
        rows *= group
        sizes = [rows * width * token_dtype.itemsize]
        if f.position_ids:
            sizes.append(rows * (width - 1) * 8)
        if f.loss_mask:
            sizes.append(rows * (width - 1) * 4)
        if f.cu_seqlens:
            sizes.append(rows * width * 4)
        if loader.labels_sources:
            sizes.append(rows * 8)  # the source of every row
        if f.row_identity:  # per row: source_id, doc_id, token_offset; packed: six per document piece
            sizes += [rows * width * 8] * 6 if packed else [rows * 8] * 3
        # a group splits into at most `group` runs of one shape, each field of a run aligned on its own; then
        # each item's lengths and numeric scalars (int64)
        self.slot_bytes = sum(_align(n) for n in sizes) + group * len(sizes) * _ALIGN + \
            _align(group * (len(sizes) + 16) * 8)


def _runs(items: list[dict[str, Any]], names: list[str]) -> list[tuple[int, int]]:
    """[start, stop) of each run of consecutive items whose arrays share trailing shapes and dtypes."""
    def shape(it: dict[str, Any]) -> tuple[Any, ...]:
        return tuple((it[n].shape[1:], it[n].dtype.str) for n in names)

    runs, start = [], 0
    for i in range(1, len(items) + 1):
        if i == len(items) or shape(items[i]) != shape(items[start]):
            runs.append((start, i))
            start = i
    return runs


class _Groups(IterableDataset):
    """Worker side: groups g ≡ worker (mod workers) of `group` consecutive units from `first`."""

    def __init__(self, loader: Loader | MixtureLoader, first: int, group: int, token_dtype: np.dtype,
                 shm_name: str, ring: int, slot_bytes: int, workers: int) -> None:
        super().__init__()
        self.loader, self.first, self.group, self.token_dtype = loader, first, group, token_dtype
        self.fields = replace(loader.config.fields, tokens_only=True)  # input_ids/labels are cut in the main process
        self.shm_name, self.ring, self.slot_bytes, self.workers = shm_name, ring, slot_bytes, workers

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker, workers = _worker()
        self._parent = os.getppid()
        # attaching registers the name again with the resource tracker, which workers share with the main
        # process (a set: no double entry); the main process unlinks it, or the tracker does if it dies
        shm = shared_memory.SharedMemory(name=self.shm_name)
        try:
            released = np.ndarray((self.workers,), np.int64, buffer=shm.buf)
            units: list[tuple[int, dict[str, Any]]] = []
            k = 0
            for unit in self.loader.iter_units(self.first + worker * self.group, stride=self.group * workers,
                                               run=self.group, fields=self.fields):
                units.append(unit)
                if len(units) == self.group:
                    yield self._ship(units, shm, released, worker, k)
                    units, k = [], k + 1
            if units:
                yield self._ship(units, shm, released, worker, k)
        finally:
            released = None  # drop the views before closing the mapping
            shm.close()

    def _wait_for_slot(self, released: np.ndarray, worker: int, k: int) -> None:
        """Until the main process has copied out the slot's previous group; exit if it died meanwhile."""
        waited = 0
        while int(released[worker]) <= k - self.ring:
            time.sleep(0.0002)
            waited += 1
            if waited % 500 == 0 and os.getppid() != self._parent:  # ~0.1 s: the trainer is gone
                os._exit(0)  # nothing to hand the group to; the resource tracker unlinks the segment

    def _ship(self, units: list[tuple[int, dict[str, Any]]], shm: shared_memory.SharedMemory,
              released: np.ndarray, worker: int, k: int) -> dict[str, Any]:
        self._wait_for_slot(released, worker, k)
        items = [item for _, item in units]
        names = [n for n, v in items[0].items() if isinstance(v, np.ndarray)]
        base = _align(self.workers * 8) + (worker * self.ring + k % self.ring) * self.slot_bytes
        layout = []
        at = 0
        for start, stop in _runs(items, names):
            for name in names:
                arrays = [it[name] for it in items[start:stop]]
                dtype = self.token_dtype if name == "tokens" else arrays[0].dtype
                shape = (sum(a.shape[0] for a in arrays), *arrays[0].shape[1:])
                nbytes = int(np.prod(shape)) * dtype.itemsize
                if at + nbytes > self.slot_bytes:
                    raise RuntimeError(f"shardkit: a group of {len(items)} items needs more than the "
                                       f"{self.slot_bytes:,}-byte slot reserved for it")
                out = np.ndarray(shape, dtype, buffer=shm.buf, offset=base + at)
                np.concatenate(arrays, axis=0, out=out)
                layout.append((name, dtype.str, shape, base + at, start, stop))
                at += _align(nbytes)
        # per-item lengths and numeric scalars travel in the slot too: the queue carries a few hundred bytes
        # whatever the number of items (a 64 KiB pipe that fills blocks a worker's feeder thread for good)
        numeric = [n for n, v in items[0].items() if not isinstance(v, np.ndarray) and _is_int(v)]
        meta = np.ndarray((len(items), len(names) + len(numeric)), np.int64, buffer=shm.buf, offset=base + at)
        meta[:, :len(names)] = [[it[n].shape[0] for n in names] for it in items]
        meta[:, len(names):] = [[it[n] for n in numeric] for it in items]
        text = {n: _run_lengths([it[n] for it in items]) for n, v in items[0].items()
                if not isinstance(v, np.ndarray) and n not in numeric}
        return {"worker": worker, "seq": k, "layout": layout, "names": names, "numeric": numeric,
                "meta": (base + at, len(items)), "text": text}


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _run_lengths(values: list[Any]) -> list[tuple[Any, int]]:
    out: list[tuple[Any, int]] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1] = (v, out[-1][1] + 1)
        else:
            out.append((v, 1))
    return out


def _unpack(group: dict[str, Any], arrays: list[torch.Tensor], meta: np.ndarray, *, tokens_only: bool
            ) -> Iterator[dict[str, Any]]:
    """The items of a group, as views of its (copied-out) tensors, one per (run, field) of the layout."""
    names, numeric = group["names"], group["numeric"]
    field = {name: j for j, name in enumerate(names)}
    lengths, scalars = meta[:, :len(names)].tolist(), meta[:, len(names):].tolist()
    text = {n: [v for v, c in runs for _ in range(c)] for n, runs in group["text"].items()}
    runs: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
    for (name, _, _, _, start, stop), t in zip(group["layout"], arrays):
        runs.setdefault((start, stop), {})[name] = t
    for (start, stop), tensors in runs.items():
        at = dict.fromkeys(names, 0)
        for i in range(start, stop):
            item: dict[str, Any] = {}
            for name, t in tensors.items():
                n = lengths[i][field[name]]
                v = t[at[name]:at[name] + n]
                at[name] += n
                if name == "tokens" and not tokens_only:
                    item["input_ids"], item["labels"] = v[:, :-1], v[:, 1:]
                else:
                    item[name] = v
            item.update(zip(numeric, scalars[i]))
            for n, values in text.items():
                item[n] = values[i]
            yield item


class ShardkitDataLoader:
    """Iterate this rank's items (batches, or micro-batches) as dicts of tensors, built by `num_workers`
    processes; `state_dict()` / `load_state_dict()` resume exactly with any worker count.

    Extra keyword arguments go to `torch.utils.data.DataLoader` (`prefetch_factor`, `persistent_workers`,
    `multiprocessing_context`, `timeout`, …); `pin_memory=True` copies groups into pinned memory here.
    `group` is the number of items per transfer (default: about 2 MiB of tokens).
    """

    def __init__(self, loader: Loader | MixtureLoader, *, num_workers: int = 0,
                 token_dtype: torch.dtype | None = None,
                 group: int | None = None, pin_memory: bool = False, **dataloader_kwargs: Any) -> None:
        bad = [k for k in _FORBIDDEN if k in dataloader_kwargs]
        if bad:
            raise ConfigError(f"ShardkitDataLoader does not take {', '.join(bad)}: items are already whole "
                              "batches in the loader's order")
        if num_workers < 0:
            raise ConfigError(f"num_workers must be ≥ 0, got {num_workers}")
        if group is not None and group < 1:
            raise ConfigError(f"group must be a positive number of items, got {group}")
        if not isinstance(loader, (Loader, MixtureLoader)):
            raise ConfigError(f"ShardkitDataLoader wraps a shardkit Loader or MixtureLoader, got "
                              f"{type(loader).__name__}")
        self.loader = loader
        self.num_workers = num_workers
        self.token_dtype = token_dtype
        self.pin_memory = pin_memory and torch.cuda.is_available()
        self.dataloader_kwargs = dataloader_kwargs
        self._tokens_only = loader.config.fields.tokens_only
        self._group = group

    def _group_size(self) -> int:
        if self._group is not None:
            return self._group
        rows, width = self.loader.item_shape(self.loader.step)
        return max(1, _GROUP_BYTES // (rows * width * self.loader.dtype.itemsize))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Items from the current position on (a second loop continues where the first stopped)."""
        first = self.loader.unit_index(self.loader.step, self.loader.micro)
        if self.num_workers == 0:
            for _, item in self.loader.iter_units(first):
                self._advance(item)
                yield to_torch(item, self.token_dtype)
            return
        token_dtype = _numpy_dtype(self.token_dtype) if self.token_dtype is not None else self.loader.dtype
        group = self._group_size()
        layout = _Layout(self.loader, token_dtype, group)
        ring = (self.dataloader_kwargs.get("prefetch_factor") or 2) + 2
        header = _align(self.num_workers * 8)
        shm = shared_memory.SharedMemory(create=True, size=header + self.num_workers * ring * layout.slot_bytes)
        try:
            released = np.ndarray((self.num_workers,), np.int64, buffer=shm.buf)
            released[:] = 0
            groups = _Groups(self.loader, first, group, token_dtype, shm.name, ring, layout.slot_bytes,
                             self.num_workers)
            dl = DataLoader(groups, batch_size=None, num_workers=self.num_workers, **self.dataloader_kwargs)
            for g in dl:
                arrays = [self._copy_out(np.ndarray(shape, np.dtype(dt), buffer=shm.buf, offset=off))
                          for _, dt, shape, off, _, _ in g["layout"]]
                off, n = g["meta"]
                meta = np.ndarray((n, len(g["names"]) + len(g["numeric"])), np.int64, buffer=shm.buf,
                                  offset=off).copy()
                released[g["worker"]] = g["seq"] + 1
                for item in _unpack(g, arrays, meta, tokens_only=self._tokens_only):
                    self._advance(item)
                    yield item
        finally:
            released = None
            shm.close()
            shm.unlink()

    def _copy_out(self, src: np.ndarray) -> torch.Tensor:
        if self.pin_memory:
            out = torch.empty(src.shape, dtype=torch.from_numpy(src[:0]).dtype, pin_memory=True)
            np.copyto(out.numpy(), src)
            return out
        return torch.from_numpy(src.copy())  # NumPy's copy: torch's uint16 copy kernel is far slower

    def _advance(self, item: dict[str, Any]) -> None:
        b, k = int(item["batch_index"]), int(item["micro_index"])
        self.loader._batch, self.loader._micro = (b, k + 1) if k + 1 < int(item["num_micro"]) else (b + 1, 0)

    @property
    def step(self) -> int:
        """Index of the next global batch to be handed out (the loader's)."""
        return self.loader.step

    def state_dict(self) -> dict[str, Any]:
        """The loader state after the last item handed out: JSON-able, resumable with any worker count."""
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any], **overrides: Any) -> None:
        """Continue from `state` (a `state_dict()` or the loader's own) at the next iteration; keyword
        arguments are the loader's resume overrides (`allow_recipe_change`, ...)."""
        self.loader.load_state_dict(state, **overrides)
