"""The datasets of a recipe, opened and checked, and one sample stream per (source, seq_len) it uses.

A stream is what the single-source loader has for its one dataset — windows (`WindowSource`), an epoch
order (`SampleOrder`) and page-cache hints (`Readahead`) — keyed by the recipe's seed and the source's
*name* (and the seq_len), never by its index or by the other sources, so adding a source to a recipe leaves
every other source's order unchanged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..batching import WindowSource
from ..batching.readahead import Readahead, ReadMetrics
from ..errors import ConfigError, InputError, ManifestError
from ..format import Dataset, open_dataset
from ..order import SampleOrder, ShuffleConfig, ShuffleMode, derive_key
from .recipe import Recipe

__all__ = ["SourceStream", "build_streams", "open_sources", "stream_seed"]


def stream_seed(seed: int, name: str, seq_len: int) -> int:
    """The order seed of source `name` at `seq_len`: derive_key(seed, first 8 bytes of sha256(name), seq_len)."""
    name_key = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")
    return derive_key(seed, name_key, seq_len)


def _resolve(path: str, base_dir: Path, name: str) -> Path:
    if "://" in path:
        raise ConfigError(f"sources.{name}.path: {path!r} is a remote URL; the mixture loader reads local "
                          "dataset directories only for now — copy or mount the dataset and give its path")
    p = Path(path).expanduser()
    return p if p.is_absolute() else base_dir / p


def open_sources(recipe: Recipe, base_dir: Path) -> dict[str, Dataset]:
    """Open every source the phases use (relative paths from `base_dir`); names the source in every error."""
    used = sorted({name for p in recipe.phases for name, _ in p.mix})
    out: dict[str, Dataset] = {}
    opened: dict[Path, Dataset] = {}  # sources naming the same directory share one Dataset (one mapping)
    for name in used:
        spec = recipe.source(name)
        path = _resolve(spec.path, base_dir, name)
        if path.resolve() in opened:
            out[name] = opened[path.resolve()]
            continue
        if not path.exists():
            rel = "" if Path(spec.path).expanduser().is_absolute() else f", relative to {base_dir}"
            raise InputError(str(path), f"source {name!r} (sources.{name}.path = {spec.path!r}{rel}): no such "
                                        "directory; fix the path or pack the dataset first")
        try:
            out[name] = opened[path.resolve()] = open_dataset(path)
        except ManifestError as e:
            raise ManifestError(e.path, f"source {name!r}: {e.problem}") from None
    for i, phase in enumerate(recipe.phases):
        for name, _ in phase.mix:
            ds = out[name]
            if (ds.num_tokens - 1) // phase.seq_len < 1:
                raise ConfigError(f"phases[{i}] ({phase.name}): seq_len {phase.seq_len:,} is too long for source "
                                  f"{name!r}: it has {ds.num_tokens:,} tokens, a window needs "
                                  f"{phase.seq_len + 1:,}; use a shorter seq_len or drop {name!r} from the phase")
    return out


@dataclass
class SourceStream:
    """One source's samples at one seq_len: windows, the epoch order, readahead, and the epoch cap."""

    name: str
    index: int  # in PhasePlan.sources
    seq_len: int
    window: WindowSource
    order: SampleOrder
    readahead: Readahead
    reads: ReadMetrics
    epochs: int | None  # None: repeat with a new permutation per epoch as long as needed

    @property
    def num_samples(self) -> int:
        return self.window.num_samples

    @property
    def limit(self) -> int | None:
        """Positions of this stream that may be drawn (epochs × samples per epoch), None when unlimited."""
        return None if self.epochs is None else self.epochs * self.num_samples

    def sample_ids(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sample ids, epochs, positions within the epoch) of stream positions: epoch e = position // n,
        a new permutation per epoch."""
        if self.limit is not None and positions.size and int(positions.max()) >= self.limit:
            raise ConfigError(f"source {self.name!r} has no epoch {int(positions.max()) // self.num_samples} "
                              f"(capped at epochs: {self.epochs}); the loader's num_batches() ends before it")
        epochs, within = np.divmod(positions, self.num_samples)
        first = int(epochs.min()) if epochs.size else 0
        if not epochs.size or first == int(epochs.max()):
            return self.order.sample_ids(first, within), epochs, within
        ids = np.empty_like(positions)
        for e in np.unique(epochs).tolist():
            m = epochs == e
            ids[m] = self.order.sample_ids(int(e), within[m])
        return ids, epochs, within


def build_streams(recipe: Recipe, datasets: dict[str, Dataset], sources: tuple[str, ...], *,
                  readahead: bool, evict: bool = True) -> dict[tuple[int, int], SourceStream]:
    """A stream per (source index, seq_len) that some phase draws from (readahead as in the Loader)."""
    out: dict[tuple[int, int], SourceStream] = {}
    index = {name: j for j, name in enumerate(sources)}
    # evicting a finished group from the page cache would drop pages another source of the same files reads
    shared = {n for n in sources if sum(datasets[m] is datasets[n] for m in sources) > 1}
    for phase in recipe.phases:
        for name, _ in phase.mix:
            j, length = index[name], phase.seq_len
            if (j, length) in out:
                continue
            ds = datasets[name]
            window = WindowSource(ds, length)
            shuffle = ShuffleConfig.default(recipe.shuffle_of(name), seq_len=length, itemsize=ds.dtype.itemsize,
                                            num_samples=window.num_samples)
            order = SampleOrder(window.num_samples, shuffle, stream_seed(recipe.seed, name, length))
            reads = ReadMetrics()
            hints = Readahead(ds, length, order.block, reads, enabled=readahead, evict=evict and name not in shared)
            out[(j, length)] = SourceStream(name=name, index=j, seq_len=length, window=window, order=order,
                                            readahead=hints, reads=reads, epochs=recipe.source(name).epochs)
    # mapping advice as in the Loader: 2 MiB pages for block/none shuffle, then no read-around for full
    # shuffle (last, so a dataset that a full-shuffle source also reads gets MADV_RANDOM)
    for stream in sorted(out.values(), key=lambda st: st.order.mode is ShuffleMode.FULL):
        if stream.order.mode is ShuffleMode.FULL:
            stream.readahead.random_access()
        else:
            stream.readahead.huge_pages()
    return out
