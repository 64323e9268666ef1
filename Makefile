# Two entry points for a fresh machine: `make demo` (the main job on the bundled default) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/shardkit demo -o demo-out

test: $(STAMP)
	$(BIN)/ruff check shardkit cli tests benchmarks
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_pack.py
	$(BIN)/python benchmarks/bench_verify.py

clean:
	rm -rf demo-out bench-data
