"""A keyed bijection of [0, n) computed per index: a Feistel network with cycle walking.

No permutation is ever stored: index i maps to its image in O(1) expected time and memory, which is
what makes the sample order a pure function and resume O(1). Everything is NumPy uint64 arithmetic,
vectorised over arrays of indices, and identical on every platform (no `hash()`, no RNG state).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError

__all__ = ["Permutation", "derive_key", "mix64"]

_M64 = (1 << 64) - 1
_C1, _C2, _GOLDEN = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0x9E3779B97F4A7C15


def _mix_int(x: int) -> int:
    x &= _M64
    x ^= x >> 30
    x = (x * _C1) & _M64
    x ^= x >> 27
    x = (x * _C2) & _M64
    return x ^ (x >> 31)


def derive_key(seed: int, *parts: int) -> int:
    """A 64-bit key from a seed and integer parts (epoch, group, …): splitmix64 chained over the parts."""
    k = _mix_int(seed + _GOLDEN)
    for p in parts:
        k = _mix_int(k ^ _mix_int((p & _M64) + _GOLDEN))
    return k


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping multiplication is intended)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(_C1)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(_C2)
    return x ^ (x >> np.uint64(31))


class Permutation:
    """perm(i) for i in [0, n): bijective, keyed, O(1) per index; `inverse` undoes it."""

    def __init__(self, n: int, key: int, rounds: int = 6) -> None:
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ConfigError(f"a permutation needs n ≥ 1 elements, got {n!r}")
        if n > 1 << 62:
            raise ConfigError(f"n = {n} is too large (max 2**62)")
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        bits += bits & 1  # two equal halves: the domain 2**bits is < 4n, so cycle walking ends fast
        self._half = np.uint64(bits // 2)
        self._mask = np.uint64((1 << (bits // 2)) - 1)
        self._keys = [np.uint64(derive_key(key, r)) for r in range(rounds)]

    def _rounds(self, x: np.ndarray, keys: list[np.uint64]) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for k in keys:
            left, right = right, left ^ (mix64(right ^ k) & self._mask)
        return (left << self._half) | right

    def _unrounds(self, x: np.ndarray, keys: list[np.uint64]) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for k in reversed(keys):
            left, right = right ^ (mix64(left ^ k) & self._mask), left
        return (left << self._half) | right

    def _walk(self, idx: np.ndarray | int, step) -> np.ndarray:
        arr = np.asarray(idx, dtype=np.int64)
        x = arr.reshape(-1)
        if x.size and (int(x.min()) < 0 or int(x.max()) >= self.n):
            raise IndexError(f"index outside [0, {self.n})")
        y = step(x.astype(np.uint64), self._keys)
        n = np.uint64(self.n)
        out = y >= n
        while out.any():  # cycle walking: re-encrypt the few that left the range
            y[out] = step(y[out], self._keys)
            out = y >= n
        return y.astype(np.int64).reshape(arr.shape)

    def __call__(self, idx: np.ndarray | int) -> np.ndarray:
        return self._walk(idx, self._rounds)

    def inverse(self, idx: np.ndarray | int) -> np.ndarray:
        return self._walk(idx, self._unrounds)
