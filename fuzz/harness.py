"""The atheris side: run one target under libFuzzer with shardkit's bytecode instrumented for coverage.

Run a harness from the repository root as a module, with libFuzzer's options after it::

    .venv/bin/python -m fuzz.fuzz_idx WORK_CORPUS fuzz/corpus/idx -max_total_time=60 -timeout=10 \\
        -rss_limit_mb=2048 -artifact_prefix=fuzz/crashes/idx-

(`fuzz/run.py` does exactly that for every target.) A `ShardkitError` is an accepted outcome; any other
exception, a per-input time over `-timeout`, or RSS over `-rss_limit_mb` is a crash and libFuzzer saves
the input under the artifact prefix.
"""

from __future__ import annotations

import sys

__all__ = ["INSTRUMENT", "main"]

# What to instrument besides shardkit: the pure-Python parsers a target leans on (more edges to explore).
INSTRUMENT: dict[str, tuple[str, ...]] = {"recipe_yaml": ("yaml",), "recipe_toml": ("tomllib", "tomli")}


def main(name: str, argv: list[str] | None = None) -> None:
    """Fuzz target `name` until libFuzzer stops (max_total_time, runs, or a crash)."""
    import atheris  # an optional test dependency: only the harness needs it

    # Imported under instrumentation on purpose (not at module level): coverage feedback needs shardkit's
    # bytecode rewritten as it is first imported, which is why fuzz/__init__.py imports nothing.
    with atheris.instrument_imports(include=["shardkit", "fuzz.targets", *INSTRUMENT.get(name, ())]):
        from fuzz.targets import TARGETS, run_one

    target = TARGETS[name]

    def one_input(data: bytes) -> None:
        run_one(target, data)

    atheris.Setup(sys.argv if argv is None else argv, one_input)
    atheris.Fuzz()
