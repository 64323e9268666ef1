"""Every shard of every source as rows of one strided view, so rows from several sources are one gather.

The single-source loader copies a slab of windows with one fancy-index over a shard's row view (row r =
the window at token phase + r·seq_len): one C call, one copy. A mixture interleaves rows from several
datasets, and gathering per source then scattering into the interleaved order copies every byte twice.
Instead, the read-only mappings of all shards (same dtype) are addressed as one array: row `r` of the
view is the `seq_len + 1` tokens starting `r` items after the lowest mapping, so the window at token `t`
of shard `s` of source `j` is row `offset[j][s] + t`, and a slab mixing all sources is `view[rows]` —
one copy, as in the single-source loader.

**The invariant that makes this safe:** the view spans gaps between mappings, so only rows whose whole
window lies inside one shard (`inside`) are ever gathered through it; windows that cross a shard boundary
(rare: one per shard boundary per epoch) get a placeholder row and are then filled by
`WindowSource.fill_located` from the two shards. The view keeps every mapping alive through the datasets
the loader holds. When the sources have different dtypes, a token array is not 16-bit aligned to the
others, or there are too many shards to map up front, `AddressSpace.build` returns None and the loader
copies per source instead.
"""

from __future__ import annotations

import numpy as np

from ..format import Dataset

__all__ = ["AddressSpace", "MAX_SHARDS"]

MAX_SHARDS = 16384  # every shard is mapped when the loader starts; stay well below vm.max_map_count


class AddressSpace:
    """Row index of (source, shard, local token) in one view over all shards; one view per window width."""

    def __init__(self, base: np.ndarray, offsets: list[np.ndarray], sizes: list[np.ndarray], span: int,
                 keep: list[np.ndarray]) -> None:
        self._base = base
        self.offsets = offsets  # per source: item offset of each shard's first token from the base
        self.sizes = sizes  # per source: tokens per shard
        self.span = span  # items from the base to the end of the highest mapping
        self._keep = keep
        self._views: dict[int, tuple[np.ndarray, int] | None] = {}

    @classmethod
    def build(cls, datasets: list[Dataset]) -> AddressSpace | None:
        """Map every shard of the sources (in source order); None when a single view cannot work."""
        dtypes = {d.dtype for d in datasets}
        if len(dtypes) != 1 or sum(d.num_shards for d in {id(d): d for d in datasets}.values()) > MAX_SHARDS:
            return None
        item = dtypes.pop().itemsize
        arrays = [[shard.tokens for shard in d.shards] for d in datasets]
        flat = [a for arrs in arrays for a in arrs if a.size]
        if not flat:
            return None
        addr = [a.__array_interface__["data"][0] for a in flat]
        low = min(addr)
        if any((x - low) % item for x in addr):
            return None
        base = flat[addr.index(low)]
        span = max((x - low) // item + a.size for x, a in zip(addr, flat))
        offsets, sizes = [], []
        for arrs in arrays:
            offsets.append(np.array([(a.__array_interface__["data"][0] - low) // item if a.size else 0
                                     for a in arrs], dtype=np.int64))
            sizes.append(np.array([a.size for a in arrs], dtype=np.int64))
        return cls(base, offsets, sizes, span, flat)

    def view(self, width: int) -> tuple[np.ndarray, int] | None:
        """(rows view of `width` tokens, a placeholder row that is safe to read), or None if no shard holds
        a whole window of that width."""
        if width not in self._views:
            placeholder = next((int(o[i]) for o, s in zip(self.offsets, self.sizes)
                                for i in np.flatnonzero(s >= width)[:1].tolist()), None)
            if placeholder is None:
                self._views[width] = None
            else:
                item = self._base.itemsize
                v = np.lib.stride_tricks.as_strided(self._base, shape=(self.span - width + 1, width),
                                                    strides=(item, item), writeable=False)
                self._views[width] = (v, placeholder)
        return self._views[width]

    def rows(self, source: int, shard: np.ndarray, local: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """(view row of each window, whether it lies inside its shard — only those may be gathered)."""
        inside = local + width <= self.sizes[source][shard]
        return self.offsets[source][shard] + local, inside
