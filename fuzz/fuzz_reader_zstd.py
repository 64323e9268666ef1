"""atheris harness for the `reader_zstd` target (see fuzz/targets.py); run: python -m fuzz.fuzz_reader_zstd CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("reader_zstd")
