"""PyTorch adapter: an IterableDataset over a loader that gives each rank the same sequence for any
number of DataLoader workers, and checkpoints through torchdata's StatefulDataLoader.

Workers split the rank's items round-robin (worker w takes items u ≡ w mod num_workers from the start
point), which is exactly the order in which DataLoader collects them, so the rank sees items in order.
Use `DataLoader(ds, batch_size=None, num_workers=k)`: items are already whole batches and travel between
processes as whole tensors in shared memory, never per sample.

The dataset holds no position of its own: an iteration starts where the wrapped loader is when it starts
(so restoring the loader before or after wrapping it gives the same batches), or where a StatefulDataLoader
state restored into it says. It pickles with its loader (configuration and position), so workers started
with fork, spawn or forkserver see the same items.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError, MissingDependencyError, ResumeError
from ..loader import Loader, MixtureLoader

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise MissingDependencyError("torch", extra="torch", purpose="shardkit.torch") from e

__all__ = ["ShardkitIterableDataset", "check_stateful_state", "to_torch"]


def to_torch(batch: dict[str, Any], token_dtype: torch.dtype | None = None, *, compact: bool = False
             ) -> dict[str, Any]:
    """NumPy arrays → tensors sharing their memory (a copy only if `token_dtype` asks for a conversion).

    `compact` (inside DataLoader workers): copy the token rows once into their own buffer and make
    input_ids/labels views of it, so one small storage crosses to the main process, not the whole slab
    the rows are views of (torch shares a tensor's entire storage), twice.
    """
    out: dict[str, Any] = {}
    np_dtype = _numpy_dtype(token_dtype) if token_dtype is not None else None
    if compact and "input_ids" in batch:
        ids = batch["input_ids"]
        rows = np.lib.stride_tricks.as_strided(ids, shape=(ids.shape[0], ids.shape[1] + 1), strides=ids.strides)
        t = torch.from_numpy(rows.astype(np_dtype or rows.dtype))  # the window rows: input_ids ∪ labels
        out["input_ids"], out["labels"] = t[:, :-1], t[:, 1:]
    for k, v in batch.items():
        if k in out:
            continue
        if isinstance(v, np.ndarray):
            if np_dtype is not None and k in ("input_ids", "labels", "tokens"):
                v = v.astype(np_dtype)  # NumPy casts uint16 far faster than torch does
            elif compact and k == "tokens":
                v = v.copy()
            out[k] = torch.from_numpy(v)
        else:
            out[k] = v
    return out


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


class ShardkitIterableDataset(IterableDataset):
    """Yields this rank's batches (or micro-batches) as dicts of tensors."""

    def __init__(self, loader: Loader | MixtureLoader, *, token_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if not isinstance(loader, (Loader, MixtureLoader)):
            raise ConfigError(f"ShardkitIterableDataset wraps a shardkit Loader or MixtureLoader, got "
                              f"{type(loader).__name__}")
        self.loader = loader
        self.token_dtype = token_dtype
        self._resume: dict[str, Any] | None = None  # a StatefulDataLoader state for this worker, until used
        self._next_unit: int | None = None  # the next unit this iterator (this worker) will yield
        self._stride = 1

    def __iter__(self):
        # Every new iteration starts at the loader's position (or at a restored StatefulDataLoader state),
        # with or without workers; progress lives in the iterator, never in the loader.
        worker, workers = _worker()
        if self._resume is not None:
            first = self.loader.unit_index(*self.loader.unit_position(self._resume_unit()))
            self._resume = None
        else:
            first = self.loader.unit_index(self.loader.step, self.loader.micro) + worker
        self._next_unit, self._stride = first, workers
        in_worker = get_worker_info() is not None
        for unit, item in self.loader.iter_units(first, stride=workers):
            self._next_unit = unit + workers
            yield to_torch(item, self.token_dtype, compact=in_worker)

    # -- checkpointing -------------------------------------------------------------------------------------
    def state_after(self, item: dict[str, Any]) -> dict[str, Any]:
        """Loader state right after `item` was consumed: save this for a resume with any worker count."""
        b, k = int(item["batch_index"]), int(item["micro_index"])
        nb, nk = (b, k + 1) if k + 1 < int(item["num_micro"]) else (b + 1, 0)
        return self.loader.state_at(nb, nk)

    def load_loader_state(self, state: dict[str, Any], **overrides: Any) -> None:
        """Start the next iteration from a `state_after` / loader state (any worker count)."""
        self.loader.load_state_dict(state, **overrides)
        self._resume = self._next_unit = None

    def state_dict(self) -> dict[str, Any]:
        """Per-worker state for torchdata's StatefulDataLoader (JSON-able)."""
        worker, workers = _worker()
        if self._next_unit is not None:
            nxt = self._next_unit
        elif self._resume is not None:
            return self._resume
        else:
            nxt = self.loader.unit_index(self.loader.step, self.loader.micro) + worker
        b, k = self.loader.unit_position(nxt)
        return {"loader": self.loader.state_at(b, k), "stride": workers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A StatefulDataLoader per-worker state: the next iteration of this worker continues from it."""
        if not isinstance(state, dict) or "loader" not in state or "stride" not in state:
            raise ResumeError("state", "expected a ShardkitIterableDataset.state_dict() (keys loader, stride)")
        _, workers = _worker()
        if state["stride"] != workers:
            raise ResumeError("stride", f"the StatefulDataLoader state was saved with {state['stride']} workers and "
                                        f"is being restored into {workers}; a StatefulDataLoader resumes only "
                                        "with its own worker count — restore the loader state instead "
                                        "(ds.load_loader_state(ds.state_after(last_item))), which takes any")
        self.loader.load_state_dict(state["loader"])  # validates it now, in this process
        self._resume = state
        self._next_unit = None

    def _resume_unit(self) -> int:
        state = self._resume["loader"]  # type: ignore[index]
        return self.loader.unit_index(state["batch"], state["micro"])


def check_stateful_state(state: Any, num_workers: int) -> None:
    """Refuse a torchdata `StatefulDataLoader.state_dict()` saved with another worker count, by name.

    StatefulDataLoader restores only with its own worker count and says so with a bare AssertionError deep
    in its iterator; call this before `load_state_dict` for a clear `ResumeError`. (To change the worker
    count, resume the loader state instead: `ds.load_loader_state(...)` takes any.)
    """
    if not isinstance(state, dict):
        raise ResumeError("state", f"expected a StatefulDataLoader.state_dict(), got {type(state).__name__}")
    saved = state.get("_num_workers", 0) if "_snapshot" in state or "_num_workers" in state else 0
    snapshot = state.get("_snapshot", {}).get("_main_snapshot", {}) if isinstance(state.get("_snapshot"), dict) \
        else {}
    saved = snapshot.get("_num_workers", saved)
    if saved != num_workers:
        raise ResumeError("num_workers", f"the StatefulDataLoader state was saved with {saved} workers and is "
                                         f"being restored into {num_workers}; StatefulDataLoader resumes only with "
                                         "its own worker count: use the same num_workers, or resume the loader "
                                         "state (ds.load_loader_state(ds.state_after(last_item))), which takes any")


def _worker() -> tuple[int, int]:
    """(worker id, number of workers) of the calling DataLoader worker; (0, 1) in the main process."""
    info = get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)
