"""atheris harness for the `zstd_frames` target (see fuzz/targets.py); run: python -m fuzz.fuzz_zstd_frames CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("zstd_frames")
