# Set-up on a fresh machine: `make compare` (the main job) and `make test` (the tests).
# Each creates .venv and installs the package on first use.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HARNESS := $(BIN)/harness

FUSED ?=
UNFUSED ?=
REPEATS ?=
MODEL ?=
AA ?=
STREAM ?=
SCENARIOS ?= scenarios

.PHONY: install bfcl test check lint typecheck compare bench e2e clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "installing into $(VENV) (first use only)"
	@$(BIN)/pip install -q -U pip > $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@$(BIN)/pip install -q -e '.[dev]' >> $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@$(BIN)/pip install -q --no-deps bfcl-eval==$(BFCL_EVAL) >> $(VENV)/install.log 2>&1 \
	  || echo "warning: bfcl-eval not installed (no PyPI?); the bfcl: suites and their tests are skipped"
	@touch $(STAMP)

install: $(STAMP)

# The BFCL multi-turn suites (bfcl:multi_turn_base, ...): bfcl-eval without its model-handler
# dependencies, plus the one module its backends import (the bfcl extra: mpmath).
BFCL_EVAL = 2026.3.23
bfcl: $(STAMP)
	$(BIN)/pip install -q -e '.[bfcl]'
	$(BIN)/pip install -q --no-deps bfcl-eval==$(BFCL_EVAL)

test: $(STAMP)
	$(BIN)/pytest -q tests

lint: $(STAMP)
	$(BIN)/ruff check harness tests bench e2e
	$(BIN)/ruff format --check harness tests bench e2e

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck

# make compare [FUSED=url UNFUSED=url] [REPEATS=n] [MODEL=name] [AA=1] [STREAM=on|both] [SCENARIOS=dir|bfcl:multi_turn_base]
AA_URL = $(or $(UNFUSED),$(FUSED))
AA_LABEL = $(if $(UNFUSED),unfused,fused)
SIDES = $(if $(AA),$(if $(AA_URL),--baseline $(AA_URL) --baseline-label $(AA_LABEL)), \
  $(if $(UNFUSED),--baseline $(UNFUSED) --baseline-label unfused) \
  $(if $(FUSED),--candidate $(FUSED) --candidate-label fused))
COMPARE_ARGS = $(strip $(SIDES) \
  $(if $(REPEATS),--repeats $(REPEATS)) $(if $(MODEL),--model $(MODEL)) \
  $(if $(AA),--aa) $(if $(STREAM),--stream $(STREAM)) $(SCENARIOS))

compare: $(STAMP)
	@if [ -n "$(FUSED)" ] && [ -z "$(UNFUSED)" ] && [ -z "$(AA)" ]; then \
	  echo "make compare: UNFUSED= is missing: give both servers (make compare FUSED=url UNFUSED=url)," >&2; \
	  echo "  or AA=1 to compare FUSED with itself, or neither URL for the built-in reference servers" >&2; exit 2; fi
	@if [ -n "$(UNFUSED)" ] && [ -z "$(FUSED)" ] && [ -z "$(AA)" ]; then \
	  echo "make compare: FUSED= is missing: give both servers (make compare FUSED=url UNFUSED=url)," >&2; \
	  echo "  or AA=1 to compare UNFUSED with itself, or neither URL for the built-in reference servers" >&2; exit 2; fi
	@echo "harness compare $(COMPARE_ARGS)"
	@$(HARNESS) compare $(COMPARE_ARGS)

# The harness's own speed and scale (bench/): one table, JSON under results/bench/.
# BENCH_ARGS="--quick" for a smoke run, "--only 1,3" for some benchmarks (~5 min in full).
# Then the decision rule's false alarms and detection power at the shipped defaults
# (bench/power.py, JSON in bench/power.json, ~30 min of CPU; POWER_ARGS="--workers 2"
# for two processes, "--parts aa" for one part) and the README's detection table from it.
BENCH_ARGS ?=
POWER_ARGS ?=
bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)
	$(BIN)/python -m bench.power --json bench/power.json $(POWER_ARGS) > /dev/null
	$(BIN)/python -m bench.power_table bench/power.json README.md

# End to end on a real server: upstream llama-server + SmolLM2-135M on the CPU (scripts/e2e.sh).
# The llama-cpp-python wheel and llama-server (from the llama.cpp tree in its sdist) are
# built once into $(HARNESS_E2E_CACHE) (~/.cache/harness-e2e); E2E_ARGS="..." for the driver.
e2e: $(STAMP)
	VENV=$(VENV) bash scripts/e2e.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
