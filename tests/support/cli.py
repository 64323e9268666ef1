import sys
from pathlib import Path


def shardkit_cmd() -> list[str]:
    """The installed console script next to this interpreter (falls back to `python -m cli.main`)."""
    exe = Path(sys.executable).with_name("shardkit")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "cli.main"]
