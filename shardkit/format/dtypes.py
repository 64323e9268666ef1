"""Token dtypes and their Megatron-LM index codes.

Megatron's `.idx` names the token dtype by a one-byte code. It has no uint32 code, so vocabularies past
65,536 ids are stored as int32 (ids stay below 2**31, so the bit patterns equal uint32's) and the shards
stay readable by megatron-core without conversion.
"""

from __future__ import annotations

import numpy as np

from ..errors import ManifestError, TokenizerError

__all__ = ["DTYPE_CODES", "CODE_DTYPES", "token_dtype_for_vocab", "dtype_code", "dtype_from_code", "dtype_name"]

# megatron.core.datasets.indexed_dataset.DType
DTYPE_CODES: dict[str, int] = {
    "uint8": 1,
    "int8": 2,
    "int16": 3,
    "int32": 4,
    "int64": 5,
    "float64": 6,
    "float32": 7,
    "uint16": 8,
}
CODE_DTYPES: dict[int, str] = {v: k for k, v in DTYPE_CODES.items()}

# Token dtypes shardkit reads (integers only: a float dataset is not a token dataset).
READABLE_TOKEN_DTYPES = ("uint8", "int8", "int16", "uint16", "int32", "int64")

MAX_VOCAB_16 = 65_536
MAX_VOCAB_32 = 2**31


def token_dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab ≤ 65,536), else int32 (see the module docstring)."""
    if vocab_size <= 0:
        raise TokenizerError(f"vocabulary size must be positive, got {vocab_size}")
    if vocab_size <= MAX_VOCAB_16:
        return np.dtype("<u2")
    if vocab_size <= MAX_VOCAB_32:
        return np.dtype("<i4")
    raise TokenizerError(
        f"vocabulary of {vocab_size:,} ids does not fit the 32-bit token format (max {MAX_VOCAB_32:,})"
    )


def dtype_name(dtype: np.dtype) -> str:
    return np.dtype(dtype).name


def dtype_code(dtype: np.dtype) -> int:
    return DTYPE_CODES[dtype_name(dtype)]


def dtype_from_code(code: int, where: str) -> np.dtype:
    """The little-endian NumPy dtype for an index code; ManifestError for unknown or non-token codes."""
    name = CODE_DTYPES.get(code)
    if name is None or name not in READABLE_TOKEN_DTYPES:
        raise ManifestError(where, f"unsupported token dtype code {code} (expected one of "
                                   f"{sorted(DTYPE_CODES[n] for n in READABLE_TOKEN_DTYPES)})")
    return np.dtype(name).newbyteorder("<")
