"""Stage 4: ordered, crash-safe shard writing and the pack journal."""

from .builder import write_dataset
from .compress import Codec, CompressionConfig
from .journal import JOURNAL_NAME, MERGE_MARKER_NAME, Journal, JournalEntry
from .shard_writer import ShardLimits, ShardWriter, shard_name

__all__ = ["JOURNAL_NAME", "MERGE_MARKER_NAME", "Codec", "CompressionConfig", "Journal", "JournalEntry", "ShardLimits", "ShardWriter",
           "shard_name", "write_dataset"]
