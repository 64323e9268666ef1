# Two entry points for a fresh machine: `make demo` (the main job on the bundled default; core dependencies
# only) and `make test` (the pinned test stack: torch, Ray, megatron-core, moto, ...; what CI runs).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.installed-core
FULL := $(VENV)/.installed-test

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(CORE): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $(CORE)

$(FULL): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $(CORE) $(FULL)

demo: $(CORE)
	$(BIN)/shardkit demo -o demo-out

test: $(FULL)
	$(BIN)/ruff check shardkit cli tests benchmarks
	$(BIN)/python -m pytest

lint: $(FULL)
	$(BIN)/ruff check shardkit cli tests benchmarks

bench: $(FULL)
	$(BIN)/python benchmarks/bench_pack.py
	$(BIN)/python benchmarks/bench_verify.py

clean:
	rm -rf demo-out bench-data
