"""atheris harness for the `dataset` target (see fuzz/targets.py); run: python -m fuzz.fuzz_dataset CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("dataset")
