"""Data mixtures: weighted interleaving of several sources, training phases, and the recipe file.

weights     exact rational weights
interleave  position → source (per-position EDF order; also the row order inside a batch)
batch_interleave  batch → rows per source within 1 of w·B (Pfair extras, carried lag)
phases      phases on batch boundaries, counters carried across them
recipe      load and validate a recipe (YAML, TOML, JSON or a dict) into frozen dataclasses
loader      MixtureLoader: a recipe's batches for this rank, resumable in O(1) (sources, cursor, assign,
            gather, rows, state and metrics are its parts; docs/mixtures.md)
"""

from .batch_interleave import BatchInterleave
from .interleave import Interleave
from .loader import MixtureConfig, MixtureLoader, MixtureWarning
from .phases import BatchMix, Location, Phase, PhaseBounds, PhasePlan
from .recipe import Recipe, RecipeWarning, SourceSpec, WeightsBy, load_recipe
from .weights import normalize_weights, token_to_sample_weights

__all__ = [
    "BatchInterleave",
    "BatchMix",
    "Interleave",
    "Location",
    "MixtureConfig",
    "MixtureLoader",
    "MixtureWarning",
    "Phase",
    "PhaseBounds",
    "PhasePlan",
    "Recipe",
    "RecipeWarning",
    "SourceSpec",
    "WeightsBy",
    "load_recipe",
    "normalize_weights",
    "token_to_sample_weights",
]
