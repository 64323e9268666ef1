"""Stage 2: turn one input file into an ordered stream of records (a document, or why it is unreadable)."""

from .dispatch import read_records
from .records import ReaderConfig, Record

__all__ = ["Record", "ReaderConfig", "read_records"]
