"""Keyed bijective permutations of [0, n) evaluated index by index, never stored.

The loader must find sample k of an epoch directly, at step 10 or step 10,000,000 alike, for datasets far too
large to hold a shuffled index in memory. A Feistel network over a power-of-two domain is a bijection by
construction whatever its round function; cycle walking (re-applying it until the value lands below n) turns
it into a bijection of [0, n). Both directions cost O(1) memory and O(1) expected time per index.

The domain is the smallest power of two ≥ n (so < 2n, and cycle walking averages < 2 passes). When its bit
count is odd the two halves differ by one bit and swap widths every round (an "alternating" Feistel
network) — still a bijection, and half the walking of rounding up to an even bit count (domain < 4n).
"""

from __future__ import annotations

from typing import Any, overload

import numpy as np

from ..errors import ConfigError
from ._checks import as_int, index_array

__all__ = ["DEFAULT_ROUNDS", "MAX_SIZE", "Permutation", "derive_key", "extend_keys", "mix64", "permute", "unpermute"]

# Luby-Rackoff needs 4 rounds, but its bound is a birthday bound on the half width, and halves here can be a
# few bits wide (small groups, block counts); 6 rounds (Patarin) visibly even out small-domain permutations.
DEFAULT_ROUNDS = 6
MAX_SIZE = 1 << 62  # halves stay ≤ 31 bits, below the round constants' bits
_MAX_ROUNDS = 16
_CHUNK = 1 << 15  # elements per pass: the working buffers stay in L2 cache
_MASK64 = (1 << 64) - 1
_C1 = 0xBF58476D1CE4E5B9  # splitmix64 finaliser constants (Stafford's "Mix13")
_C2 = 0x94D049BB133111EB
_GOLDEN = 0x9E3779B97F4A7C15
_U = np.uint64


def _mix_int(x: int) -> int:
    x &= _MASK64
    x ^= x >> 30
    x = (x * _C1) & _MASK64
    x ^= x >> 27
    x = (x * _C2) & _MASK64
    return x ^ (x >> 31)


# per-round constants, zero in the low 32 bits (where the ≤ 31-bit half lives): (half, round) ↦ half ⊕ constant
# is injective for a fixed key
_ROUND = [_U(_mix_int(r + 1) & ~0xFFFFFFFF) for r in range(_MAX_ROUNDS)]


def _mix_inplace(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array, in place; the multiplies wrap modulo 2**64 on purpose."""
    with np.errstate(over="ignore"):
        z ^= z >> _U(30)
        z *= _U(_C1)
        z ^= z >> _U(27)
        z *= _U(_C2)
        z ^= z >> _U(31)
    return z


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a copy of `x` as uint64: a fast, well-avalanching bijection of 64-bit words."""
    return _mix_inplace(np.array(x, dtype=np.uint64))


def _extend_int(key: int, part: int) -> int:
    return _mix_int(key ^ _mix_int(part + _GOLDEN))


def derive_key(seed: int, *parts: int) -> int:
    """Fold a seed and integer parts (a tag, the epoch, a group…) into one 64-bit key.

    Pure integer arithmetic, so keys are identical on every platform and Python version (unlike `hash()`).
    Ints are taken modulo 2**64; order matters (`derive_key(s, a, b) != derive_key(s, b, a)`).
    """
    key = _mix_int(as_int("seed", seed) + _GOLDEN)
    for part in parts:
        key = _extend_int(key, as_int("key part", part))
    return key


def extend_keys(key: int, parts: np.ndarray) -> np.ndarray:
    """Vectorised last fold of `derive_key`: `extend_keys(derive_key(s, *p), a)[i] == derive_key(s, *p, a[i])`."""
    z = np.asarray(parts).astype(np.uint64)  # int64 → uint64 wraps negatives exactly like `& _MASK64`
    with np.errstate(over="ignore"):
        z += _U(_GOLDEN)
    _mix_inplace(z)
    z ^= _U(key & _MASK64)
    return _mix_inplace(z)


def _domain_bits(n: int) -> int:
    return max(2, (n - 1).bit_length())


class _Network:
    """The Feistel rounds over one chunk, in place, with preallocated scratch (no per-op allocation)."""

    def __init__(self, bits: int, rounds: int, size: int) -> None:
        self.bits, self.rounds = bits, rounds
        self._half = np.empty(size, np.uint64)
        self._f = np.empty(size, np.uint64)
        self._t = np.empty(size, np.uint64)

    def _round_function(self, half: np.ndarray, r: int, keys: np.ndarray | np.uint64, out_bits: int) -> np.ndarray:
        """Top `out_bits` bits of a multiply-xorshift-multiply hash of (half ⊕ key ⊕ round constant).

        This is splitmix64's finaliser without its two outer xor-shifts, which do little here: the input varies
        only in its low ≤ 31 bits (the first shift would mostly xor in a per-key constant) and only the top
        ≤ 31 output bits are kept (the last shift never reaches them).
        """
        f, t = self._f[: half.size], self._t[: half.size]
        if isinstance(keys, np.ndarray):
            np.bitwise_xor(half, keys, out=f)
            f ^= _ROUND[r]
        else:
            np.bitwise_xor(half, keys ^ _ROUND[r], out=f)
        f *= _U(_C1)
        np.right_shift(f, _U(27), out=t)
        f ^= t
        f *= _U(_C2)
        f >>= _U(64 - out_bits)
        return f

    def forward(self, x: np.ndarray, keys: np.ndarray | np.uint64) -> None:
        wr = self.bits // 2
        wl = self.bits - wr
        right = self._half[: x.size]
        for r in range(self.rounds):  # (L, R) → (R, L ^ F(R)); the halves swap widths when bits is odd
            np.bitwise_and(x, _U((1 << wr) - 1), out=right)
            x >>= _U(wr)
            x ^= self._round_function(right, r, keys, wl)
            right <<= _U(wl)
            x |= right
            wl, wr = wr, wl

    def backward(self, x: np.ndarray, keys: np.ndarray | np.uint64) -> None:
        wr = self.bits // 2
        wl = self.bits - wr
        if self.rounds % 2:
            wl, wr = wr, wl  # the widths after the last forward round
        right = self._half[: x.size]
        for r in reversed(range(self.rounds)):
            np.right_shift(x, _U(wr), out=right)
            x &= _U((1 << wr) - 1)
            x ^= self._round_function(right, r, keys, wr)
            x <<= _U(wl)
            x |= right
            wl, wr = wr, wl


def _apply(net: _Network, x: np.ndarray, keys: np.ndarray | np.uint64, inverse: bool) -> None:
    step = net.backward if inverse else net.forward
    with np.errstate(over="ignore"):
        for lo in range(0, x.size, _CHUNK):
            k = keys[lo: lo + _CHUNK] if isinstance(keys, np.ndarray) else keys
            step(x[lo: lo + _CHUNK], k)


def _walk(idx: np.ndarray, n: int, keys: int | np.ndarray, rounds: int, inverse: bool) -> np.ndarray:
    shape = np.shape(idx)
    if n == 1:
        return np.zeros(shape, dtype=np.int64)
    x = np.asarray(idx).reshape(-1).astype(np.uint64)  # a private copy, permuted in place
    if isinstance(keys, np.ndarray):
        k: np.ndarray | np.uint64 = np.ascontiguousarray(np.broadcast_to(keys, shape).reshape(-1), np.uint64)
    else:
        k = _U(as_int("key", keys) & _MASK64)
    net = _Network(_domain_bits(n), rounds, min(x.size, _CHUNK))
    _apply(net, x, k, inverse)
    todo = np.flatnonzero(x >= _U(n))
    while todo.size:  # cycle walking, on the stragglers only
        sub = x[todo]
        _apply(net, sub, k[todo] if isinstance(k, np.ndarray) else k, inverse)
        x[todo] = sub
        todo = todo[sub >= _U(n)]
    return x.view(np.int64).reshape(shape)  # every value is < n ≤ 2**62


def permute(idx: np.ndarray, n: int, keys: int | np.ndarray, rounds: int = DEFAULT_ROUNDS) -> np.ndarray:
    """Image of each index under the permutation of [0, n) keyed by `keys` (one key, or one per element).

    The unchecked vectorised core (the caller guarantees 0 ≤ idx < n ≤ MAX_SIZE): per-element keys let the
    block shuffle evaluate many groups' permutations in one call.
    """
    return _walk(idx, n, keys, rounds, inverse=False)


def unpermute(idx: np.ndarray, n: int, keys: int | np.ndarray, rounds: int = DEFAULT_ROUNDS) -> np.ndarray:
    """Inverse of `permute` with the same arguments."""
    return _walk(idx, n, keys, rounds, inverse=True)


def _is_scalar(idx: Any) -> bool:
    return not isinstance(idx, np.ndarray) and np.ndim(idx) == 0


class Permutation:
    """A pseudo-random bijection of [0, n) fixed by a 64-bit key, evaluated on arrays of indices.

    Called with an int it returns an int; with an array, an int64 array of the same shape.
    """

    __slots__ = ("n", "key", "rounds")

    def __init__(self, n: int, key: int, rounds: int = DEFAULT_ROUNDS) -> None:
        n = as_int("permutation size n", n)
        if not 1 <= n <= MAX_SIZE:
            raise ConfigError(f"a permutation needs 1 ≤ n ≤ 2**62 elements, got n = {n}")
        rounds = as_int("rounds", rounds)
        if not 2 <= rounds <= _MAX_ROUNDS:
            raise ConfigError(f"rounds must be in [2, {_MAX_ROUNDS}] (default {DEFAULT_ROUNDS}), "
                              f"got {rounds}")
        self.n = n
        self.key = as_int("key", key) & _MASK64
        self.rounds = rounds

    @overload
    def __call__(self, idx: int) -> int: ...
    @overload
    def __call__(self, idx: np.ndarray) -> np.ndarray: ...
    def __call__(self, idx: int | np.ndarray) -> int | np.ndarray:
        out = permute(index_array(idx, self.n, "permutation index"), self.n, self.key, self.rounds)
        return int(out) if _is_scalar(idx) else out

    @overload
    def inverse(self, idx: int) -> int: ...
    @overload
    def inverse(self, idx: np.ndarray) -> np.ndarray: ...
    def inverse(self, idx: int | np.ndarray) -> int | np.ndarray:
        """Where each value comes from: `p.inverse(p(x)) == x` — e.g. to find a sample's position in an epoch."""
        out = unpermute(index_array(idx, self.n, "permutation value"), self.n, self.key, self.rounds)
        return int(out) if _is_scalar(idx) else out

    def __repr__(self) -> str:
        return f"Permutation(n={self.n}, key={self.key:#018x}, rounds={self.rounds})"
