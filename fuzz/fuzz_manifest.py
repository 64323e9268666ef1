"""atheris harness for the `manifest` target (see fuzz/targets.py); run: python -m fuzz.fuzz_manifest CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("manifest")
