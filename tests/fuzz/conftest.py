"""The fuzz targets live in the top-level `fuzz/` package: put the repository root on the import path."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
