"""Stage 7: the read engine — one pipeline behind `Loader` and `MixtureLoader`.

plan       which rows make up global batch b: source, stream position, sample id, shard (pure functions)
mapper     shard mappings: one per shard, a true LRU under a descriptor budget; indices checked once
gather     slabs of rows copied with one gather each (a view spanning the held mappings)
fields     labels, position ids, cu_seqlens, loss masks (document starts from the mapped indices)
readahead  page-cache hints for this rank's reads, from one bounded worker thread
state      the one versioned state format, its migration from version 1, and the resume overrides
resume     a saved state checked against a loader: continue exactly, take over, or a named refusal
config     where this rank sits and how it reads, validated at construction
core       the Engine: items (batches or micro-batches) of a plan, chunk by chunk, slab by slab
"""

from .config import Placement, ReadOptions
from .core import Engine
from .fields import BatchFields
from .mapper import Mapper, default_budget
from .plan import ENDLESS_TOKENS, Plan, SourceDef, Stream
from .resume import resume
from .state import STATE_FORMAT, STATE_VERSION, Overrides, make_state, parse_state, stream_fingerprint
from .windows import Windows, num_windows

__all__ = ["ENDLESS_TOKENS", "STATE_FORMAT", "STATE_VERSION", "BatchFields", "Engine", "Mapper", "Overrides",
           "Placement", "Plan", "ReadOptions", "SourceDef", "Stream", "Windows", "default_budget", "make_state",
           "num_windows", "parse_state", "resume", "stream_fingerprint"]
