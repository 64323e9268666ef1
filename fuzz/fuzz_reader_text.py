"""atheris harness for the `reader_text` target (see fuzz/targets.py); run: python -m fuzz.fuzz_reader_text CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("reader_text")
