"""torchdata's `StatefulDataLoader` with a clear refusal of another worker count.

StatefulDataLoader restores only with the worker count it was saved with, and says so with a bare
`AssertionError` from deep inside its iterator. This subclass checks the count when the state is loaded and
raises a `ResumeError` naming both counts (and how to change the count: resume the loader state instead).
"""

from __future__ import annotations

from typing import Any

from ..errors import MissingDependencyError
from .torch_dataset import check_stateful_state

try:
    from torchdata.stateful_dataloader import StatefulDataLoader as _Base
except ImportError as e:  # pragma: no cover - exercised only without torchdata
    raise MissingDependencyError("torchdata", purpose="shardkit.torch.StatefulDataLoader") from e

__all__ = ["StatefulDataLoader"]


class StatefulDataLoader(_Base):
    """`torchdata.stateful_dataloader.StatefulDataLoader`, whose `load_state_dict` names a worker-count change."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        check_stateful_state(state_dict, self.num_workers)
        super().load_state_dict(state_dict)
