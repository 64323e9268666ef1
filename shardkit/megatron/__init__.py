"""Megatron-LM compatibility: megatron-core's GPTDataset / BlendedDataset sample order over shardkit data."""

from .batches import MegatronBatches
from .blend import blending_indices, normalize_weights, samples_per_dataset
from .cache import IndexCache, cache_key
from .gpt_index import document_index, plan_epochs, sample_index, shuffle_index
from .order import BlendOrder, GPTOrder, MegatronConfig, MegatronPrefix, build_order, prefixes_of
from .split import Split, split_documents, split_matrix

__all__ = [
    "BlendOrder", "GPTOrder", "IndexCache", "MegatronBatches", "MegatronConfig", "MegatronPrefix", "Split", "blending_indices",
    "build_order", "cache_key", "document_index", "normalize_weights", "plan_epochs", "prefixes_of", "sample_index",
    "samples_per_dataset", "shuffle_index", "split_documents", "split_matrix",
]
