"""atheris harness for the `mixture_state` target (see fuzz/targets.py); run: python -m fuzz.fuzz_mixture_state CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("mixture_state")
