"""Stage 7: windows → batch arrays, and the loader's versioned state."""

from .fields import BatchFields, assemble
from .state import STATE_FORMAT, STATE_VERSION, check_state, make_state
from .windows import WindowSource, num_windows

__all__ = ["STATE_FORMAT", "STATE_VERSION", "BatchFields", "WindowSource", "assemble", "check_state",
           "make_state", "num_windows"]
