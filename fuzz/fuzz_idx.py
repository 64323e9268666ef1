"""atheris harness for the `idx` target (see fuzz/targets.py); run: python -m fuzz.fuzz_idx CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("idx")
