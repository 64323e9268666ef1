"""megatron-core's blend: which dataset serves each blended sample, and how many samples each must hold.

`blending_indices` is `helpers.build_blending_indices` (greedy: each sample goes to the dataset furthest
behind its weight, ties to the lowest index), evaluated in the same double-precision arithmetic so the
assignment matches for every sample. `samples_per_dataset` is the builder's
`_get_size_per_split_per_dataset`, with the `mid_level_dataset_surplus` margin (0.005 by default) that
sizes each GPTDataset.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError

__all__ = ["DEFAULT_SURPLUS", "blend_chunk", "blending_indices", "check_blend_width", "normalize_weights",
           "samples_per_dataset"]

DEFAULT_SURPLUS = 0.005  # BlendedMegatronDatasetConfig.mid_level_dataset_surplus


def normalize_weights(weights: Sequence[float]) -> list[float]:
    """megatron `utils.normalize`: float64 division by the sum (the exact values the blend uses)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ConfigError(f"blend weights must be positive finite numbers, got {list(weights)}")
    return (w / np.sum(w)).tolist()


def samples_per_dataset(normalized: Sequence[float], size: int, surplus: float = 0.0) -> list[int]:
    """Samples requested from each dataset for a blend of `size`: ceil(ceil(size * w) * (1 + surplus))."""
    return [int(math.ceil(math.ceil(size * w) * (1 + surplus))) for w in normalized]


def blending_indices(normalized: Sequence[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """(dataset_index int16, dataset_sample_index int64) of a blend of `size` samples, as megatron-core builds them.

    The greedy choice depends on every earlier choice, so it runs in order, one sample at a time (about
    0.3 µs each in CPython). This whole-array form is the test oracle; orders build the blend lazily, chunk by
    chunk from checkpointed counts (`BlendChunks`), and cache the result (`IndexCache`).
    """
    check_blend_width(len(normalized))
    di, dsi, _ = blend_chunk(normalized, 0, [0] * len(normalized), size)
    return di, dsi


def check_blend_width(k: int) -> None:
    if k >= 32767:
        raise ConfigError(f"a Megatron blend holds fewer than 32767 datasets, got {k}")


def blend_chunk(normalized: Sequence[float], start: int, counts: Sequence[int], n: int
                ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Samples [start, start + n) of the blend, given each dataset's count before `start`; also the counts after.

    helpers.cpp's loop exactly: `error = weights[d] * max(double(i), 1.0) - double(current_samples[d])`, the
    first dataset of the largest error wins (strict `>`), all in IEEE double as Python floats are.
    """
    weights = [float(w) for w in np.asarray(normalized, dtype=np.float64)]
    k = len(weights)
    dataset_index = np.empty(n, dtype=np.int16)
    dataset_sample_index = np.empty(n, dtype=np.int64)
    c = [int(v) for v in counts]
    w0 = weights[0]
    for t in range(n):
        i = start + t
        x = float(i) if i >= 1 else 1.0  # std::max(double(i), 1.0)
        best, best_err = 0, w0 * x - c[0]
        for d in range(1, k):
            err = weights[d] * x - c[d]
            if err > best_err:
                best, best_err = d, err
        dataset_index[t] = best
        dataset_sample_index[t] = c[best]
        c[best] += 1
    return dataset_index, dataset_sample_index, c
