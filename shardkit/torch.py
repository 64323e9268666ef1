"""`shardkit.torch`: the PyTorch adapter (needs the optional torch dependency)."""

from .adapters.torch_dataset import ShardkitIterableDataset, to_torch

__all__ = ["ShardkitIterableDataset", "to_torch"]
