"""Data mixtures: weighted interleaving of several sources, training phases, and the recipe file.

interleave  batch → rows per source within 1 of w·B (Pfair extras, carried lag); phases on batch boundaries
recipe      load and validate a recipe (YAML, TOML, JSON or a dict) into frozen dataclasses
loader      MixtureLoader: a recipe's batches for this rank, resumable in O(1) (sources, cursor, assign,
            gather, rows, state and metrics are its parts; docs/mixtures.md)
"""

from .interleave import (
    BatchInterleave,
    BatchMix,
    Interleave,
    Location,
    Phase,
    PhaseBounds,
    PhasePlan,
    normalize_weights,
    token_to_sample_weights,
)
from .loader import MixtureConfig, MixtureLoader, MixtureWarning
from .recipe import Recipe, RecipeWarning, SourceSpec, WeightsBy, load_recipe

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
