"""`shardkit.torch`: the PyTorch adapter (needs the optional torch dependency)."""

from .adapters.torch_dataset import ShardkitIterableDataset, check_stateful_state, to_torch
from .adapters.torch_loader import ShardkitDataLoader

__all__ = ["ShardkitDataLoader", "ShardkitIterableDataset", "check_stateful_state", "to_torch"]
