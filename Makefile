# Two commands for a fresh machine: `make demo` and `make test`.
# The venv's interpreter: Debian's python3.11 where it is installed with its venv module (built with
# PGO and LTO, the interpreter linked statically: 1.4x the speed of a default source or pyenv build on
# pure-Python loops, and a p99 latency ~0.3 ms lower in bench/README.md), else python3.11, else python3.
# `make PYTHON=... test` picks another.
SYSTEM_PYTHON := $(shell /usr/bin/python3.11 -c 'import ensurepip, venv' >/dev/null 2>&1 && echo /usr/bin/python3.11)
PYTHON ?= $(or $(SYSTEM_PYTHON),$(shell command -v python3.11 2>/dev/null),python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck check bench clean soak

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or run: make PYTHON=python3 ...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,demo]'
	@touch $(STAMP)

# The Spark job's Python workers must run the venv's interpreter.
demo: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(BIN)/python) PYSPARK_DRIVER_PYTHON=$(abspath $(BIN)/python) $(BIN)/rocketflow demo

# The console's browser tests drive Debian's chromium (never a downloaded browser): installed here when
# missing and this is root (as on CI), else `sudo apt-get install chromium` first.
test: $(STAMP)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || echo "note: the console tests need Debian's chromium (apt-get install chromium)"
	$(BIN)/python -m pytest -q tests

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict src
	$(BIN)/lint-imports

check: lint typecheck test

# The reliability suites with soak counts (more crash cycles, a million fuzz frames, longer churn,
# the size fuzzer up to 64x).
soak: $(STAMP)
	ROCKETFLOW_SOAK=1 $(BIN)/python -m pytest -q -s --timeout=0 tests/reliability

bench: $(STAMP)
	@echo "benchmarks: see bench/README.md"

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
