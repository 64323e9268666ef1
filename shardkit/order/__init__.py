"""Stage 6: the sample order and batch geometry as pure, vectorised functions."""

from .partition import micro_batches, rank_slice
from .permutation import Permutation, derive_key
from .schedule import BatchSchedule, Constant, Piecewise, Ramp, parse_schedule
from .shuffle import SampleOrder, ShuffleConfig, ShuffleMode

__all__ = [
    "BatchSchedule",
    "Constant",
    "Permutation",
    "Piecewise",
    "Ramp",
    "SampleOrder",
    "ShuffleConfig",
    "ShuffleMode",
    "derive_key",
    "micro_batches",
    "parse_schedule",
    "rank_slice",
]
