"""Windows of `seq_len + 1` tokens over one dataset's flat token stream: where each sample lives.

Sample `i` is tokens [i·seq_len, i·seq_len + seq_len + 1): consecutive windows overlap by one token, so
every token is a label exactly once per epoch. Windows cross document boundaries freely (the index says
where documents start) and, rarely, shard boundaries (the gather assembles those from both shards).
Everything here is arithmetic over the manifest's per-shard token counts; nothing is mapped.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..format.dataset import Dataset

__all__ = ["Windows", "num_windows"]


def num_windows(num_tokens: int, seq_len: int) -> int:
    """Samples of `seq_len` (windows of seq_len + 1 tokens) in a stream of `num_tokens` tokens."""
    return max(0, (num_tokens - 1) // seq_len)


class Windows:
    """The window geometry of one dataset at one seq_len, in global shard ids of a `Mapper`."""

    def __init__(self, dataset: Dataset, seq_len: int, gid_base: int = 0) -> None:
        if seq_len < 1:
            raise ConfigError(f"seq_len must be ≥ 1, got {seq_len}")
        self.dataset = dataset
        self.seq_len = seq_len
        self.width = seq_len + 1
        self.gid_base = gid_base
        self.num_samples = num_windows(dataset.num_tokens, seq_len)
        if self.num_samples == 0:
            raise ConfigError(f"{dataset.path}: {dataset.num_tokens:,} tokens hold no window of seq_len + 1 = "
                              f"{self.width:,} tokens; use a smaller seq_len or more data")
        self.offsets = dataset.token_offsets  # first token of each shard in the flat stream, then the total
        self.sizes = np.diff(self.offsets)

    def locate(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard index within the dataset, start within that shard) of each sample's first token."""
        starts = np.asarray(sample_ids, dtype=np.int64) * self.seq_len
        shard = np.searchsorted(self.offsets, starts, side="right") - 1
        return shard, starts - self.offsets[shard]

    def inside(self, shard: np.ndarray, local: np.ndarray) -> np.ndarray:
        """Whether each window lies wholly inside its shard (else it is assembled from the next ones)."""
        return (local + self.width) <= self.sizes[shard]

    def token_ranges(self, first: np.ndarray, stop: np.ndarray) -> list[tuple[int, int, int]]:
        """(shard, first token, end token) pieces of flat-stream ranges [first, stop), split at shard ends."""
        out = []
        for lo, hi in zip(np.asarray(first).tolist(), np.asarray(stop).tolist()):
            hi = min(hi, int(self.offsets[-1]))
            s = int(np.searchsorted(self.offsets, lo, side="right")) - 1
            while lo < hi and s < self.dataset.num_shards:
                end = min(hi, int(self.offsets[s + 1]))
                if end > lo:
                    out.append((s, lo - int(self.offsets[s]), end - int(self.offsets[s])))
                lo, s = end, s + 1
        return out
