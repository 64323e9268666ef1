"""`shardkit.torch`: the PyTorch adapter (needs the optional torch dependency)."""

from .adapters.torch_dataset import ShardkitIterableDataset, check_stateful_state, to_torch
from .adapters.torch_loader import ShardkitDataLoader

__all__ = ["ShardkitDataLoader", "ShardkitIterableDataset", "check_stateful_state", "to_torch"]  # + StatefulDataLoader


def __getattr__(name: str) -> object:
    """`StatefulDataLoader` needs torchdata as well as torch: it is loaded on first use."""
    if name == "StatefulDataLoader":
        from .adapters.stateful import StatefulDataLoader

        return StatefulDataLoader
    raise AttributeError(f"module 'shardkit.torch' has no attribute {name!r}")
