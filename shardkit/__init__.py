"""shardkit: pack text corpora into large indexed token shards; stream deterministic, resumable batches."""

import logging

__version__ = "0.1.0"

# library messages go to the "shardkit" logger tree; the application (or the CLI: -v / -q) decides where
logging.getLogger("shardkit").addHandler(logging.NullHandler())

from .engine import BatchFields  # noqa: E402
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
from .format import Dataset, Manifest, open_dataset  # noqa: E402
from .loader import Loader, LoaderConfig, MixtureConfig, MixtureLoader  # noqa: E402
from .mixture import Recipe, load_recipe  # noqa: E402
from .order import Constant, Piecewise, Ramp  # noqa: E402
from .verify import verify_dataset  # noqa: E402

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
