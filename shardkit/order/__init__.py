"""Stage 6: the sample order and batch geometry as pure, vectorised functions.

permutation  keyed bijections of [0, n), O(1) per index (Feistel network + cycle walking)
shuffle      epoch position → sample id: none / block (page-cache friendly) / full
schedule     batch-size schedules: B(b), S(b) and their inverses in O(log stages)
partition    rank slices, micro-batches, round-robin worker split
packing      how rows are cut: windows, or documents packed first-fit / best-fit
"""

from .packing import PackingStrategy
from .partition import item_sequence, micro_batches, rank_slice, worker_batches, worker_of_batch
from .permutation import Permutation, derive_key, extend_keys
from .schedule import BatchSchedule, Constant, Piecewise, Ramp, ScheduleUnit, parse_schedule
from .shuffle import SampleOrder, ShuffleConfig, ShuffleMode

__all__ = [
    "BatchSchedule",
    "Constant",
    "PackingStrategy",
    "Permutation",
    "Piecewise",
    "Ramp",
    "SampleOrder",
    "ScheduleUnit",
    "ShuffleConfig",
    "ShuffleMode",
    "derive_key",
    "extend_keys",
    "micro_batches",
    "parse_schedule",
    "rank_slice",
    "worker_batches",
    "worker_of_batch",
    "item_sequence",
]
