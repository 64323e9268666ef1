"""shardkit: pack text corpora into large indexed token shards; stream deterministic, resumable batches."""

import logging

__version__ = "0.1.0"

# library messages go to the "shardkit" logger tree; the application (or the CLI: -v / -q) decides where
logging.getLogger("shardkit").addHandler(logging.NullHandler())

import importlib  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from .errors import (  # noqa: E402
    ConfigError,
    IntegrityError,
    ManifestError,
    MissingDependencyError,
    PackError,
    ReaderError,
    ResumeError,
    ShardkitError,
    TokenizerError,
)

# The public names below are imported on first use (PEP 562): a process that only packs (a pack worker,
# `shardkit pack`) never imports the read engine, the object-store client or the recipe parser — half a
# second of start-up per process.
_LAZY = {
    "BatchFields": ".engine",
    "Dataset": ".format", "Manifest": ".format", "open_dataset": ".format",
    "Loader": ".loader", "LoaderConfig": ".loader", "MixtureConfig": ".loader", "MixtureLoader": ".loader",
    "Recipe": ".mixture", "load_recipe": ".mixture",
    "Constant": ".order", "Piecewise": ".order", "Ramp": ".order",
    "verify_dataset": ".verify",
}

if TYPE_CHECKING:
    from .engine import BatchFields
    from .format import Dataset, Manifest, open_dataset
    from .loader import Loader, LoaderConfig, MixtureConfig, MixtureLoader
    from .mixture import Recipe, load_recipe
    from .order import Constant, Piecewise, Ramp
    from .verify import verify_dataset


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'shardkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "__version__",
    "BatchFields",
    "ConfigError",
    "Constant",
    "Dataset",
    "IntegrityError",
    "Loader",
    "LoaderConfig",
    "Manifest",
    "ManifestError",
    "MixtureConfig",
    "MixtureLoader",
    "MissingDependencyError",
    "PackError",
    "Piecewise",
    "Ramp",
    "Recipe",
    "ReaderError",
    "ResumeError",
    "ShardkitError",
    "TokenizerError",
    "load_recipe",
    "open_dataset",
    "verify_dataset",
]
