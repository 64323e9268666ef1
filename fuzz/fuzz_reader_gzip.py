"""atheris harness for the `reader_gzip` target (see fuzz/targets.py); run: python -m fuzz.fuzz_reader_gzip CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("reader_gzip")
