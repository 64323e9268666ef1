"""atheris harness for the `loader_state` target (see fuzz/targets.py); run: python -m fuzz.fuzz_loader_state CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("loader_state")
