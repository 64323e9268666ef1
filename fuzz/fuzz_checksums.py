"""atheris harness for the `checksums` target (see fuzz/targets.py); run: python -m fuzz.fuzz_checksums CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("checksums")
