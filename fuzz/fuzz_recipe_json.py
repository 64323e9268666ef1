"""atheris harness for the `recipe_json` target (see fuzz/targets.py); run: python -m fuzz.fuzz_recipe_json CORPUS... [libFuzzer flags]."""

from fuzz.harness import main

if __name__ == "__main__":
    main("recipe_json")
