"""Worker functions for the pool start-up race test (importable by spawned workers)."""

import os
import time
from pathlib import Path


def slow_second_init(directory: str) -> None:
    """The first worker to start reads at once; every later one starts 1.5 s late, then reads the file the
    caller removes once the map is done (what the pack's scratch directory is to the tokenizer workers)."""
    d = Path(directory)
    try:
        os.close(os.open(d / "first", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        time.sleep(1.5)
    (d / "setup.txt").read_text()


def double(x: int) -> int:
    return 2 * x
