"""Data mixtures: weighted interleaving of several sources, training phases, and the recipe file.

weights     exact rational weights
interleave  position → source (per-position EDF order; also the row order inside a batch)
batch_interleave  batch → rows per source within 1 of w·B (Pfair extras, carried lag)
phases      phases on batch boundaries, counters carried across them
recipe      load and validate a recipe (YAML, TOML, JSON or a dict) into frozen dataclasses
cursor      each source's position at any global batch (continued by tokens across seq_len changes)
sources     a recipe's datasets opened, and each source's order seed

The loader over a recipe is `shardkit.MixtureLoader` (shardkit/loader.py, on the read engine).
"""

from .batch_interleave import BatchInterleave
from .interleave import Interleave
from .phases import BatchMix, Location, Phase, PhaseBounds, PhasePlan
from .recipe import MixtureWarning, Recipe, RecipeWarning, SourceSpec, WeightsBy, load_recipe
from .weights import normalize_weights, token_to_sample_weights

__all__ = [
    "BatchInterleave",
    "BatchMix",
    "Interleave",
    "Location",
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
