"""Data mixtures: weighted interleaving of several sources, training phases, and the recipe file.

interleave  position → (source, source's counter): an exact quota order; phases on batch boundaries
recipe      load and validate a recipe (YAML, TOML, JSON or a dict) into frozen dataclasses
"""

from .interleave import (
    BatchMix,
    Interleave,
    Location,
    Phase,
    PhaseBounds,
    PhasePlan,
    normalize_weights,
    token_to_sample_weights,
)
from .recipe import Recipe, RecipeWarning, SourceSpec, WeightsBy, load_recipe

__all__ = [
    "BatchMix",
    "Interleave",
    "Location",
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
