"""The on-disk dataset format: manifest, Megatron `.idx`, block checksums, and the reader."""

from .checksums import DEFAULT_BLOCK_SIZE, BlockHasher, FileChecksums, ShardChecksums, digest_bytes
from .dataset import Dataset, Shard, open_dataset
from .dtypes import token_dtype_for_vocab
from .idx import INDEX_MAGIC, IndexFile, encode_index, read_index
from .manifest import MANIFEST_NAME, Manifest, ShardEntry, check_shard_name

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "INDEX_MAGIC",
    "MANIFEST_NAME",
    "BlockHasher",
    "Dataset",
    "FileChecksums",
    "IndexFile",
    "Manifest",
    "Shard",
    "ShardChecksums",
    "ShardEntry",
    "check_shard_name",
    "digest_bytes",
    "encode_index",
    "open_dataset",
    "read_index",
    "token_dtype_for_vocab",
]
