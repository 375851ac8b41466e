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

.PHONY: install bfcl test check lint typecheck shellcheck compare record bench calibrate e2e e2e-panel docs clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "installing into $(VENV) (first use only)"
	@$(BIN)/pip install -q -U pip > $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@# the distribution was called harness before 0.2.0: two would register the plugin twice
	@$(BIN)/pip uninstall -q -y harness >> $(VENV)/install.log 2>&1 || true
	@$(BIN)/pip install -q -e '.[dev]' >> $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@$(BIN)/pip install -q --no-deps bfcl-eval==$(BFCL_EVAL) >> $(VENV)/install.log 2>&1 \
	  || echo "warning: bfcl-eval not installed (no PyPI?); the bfcl: suites and their tests are skipped"
	@touch $(STAMP)

install: $(STAMP)

# The BFCL multi-turn suites (bfcl:multi_turn_base, ...): bfcl-eval without its model-handler
# dependencies, plus the one module its backends import (the bfcl extra: mpmath).
BFCL_EVAL = 2026.3.23
bfcl: $(STAMP)
	@$(BIN)/pip install -q -e '.[bfcl]' > $(VENV)/bfcl-install.log 2>&1 \
	  || (cat $(VENV)/bfcl-install.log; exit 1)
	@$(BIN)/pip install -q --no-deps bfcl-eval==$(BFCL_EVAL) >> $(VENV)/bfcl-install.log 2>&1 \
	  || (cat $(VENV)/bfcl-install.log; exit 1)
	@echo "bfcl-eval $(BFCL_EVAL) installed (log: $(VENV)/bfcl-install.log)"

# The tests on every core (pytest-xdist; most wait on servers over sockets): about half the
# serial time on 2 cores. TEST_WORKERS=0 runs them in one process (pytest's own order).
TEST_WORKERS ?= auto
test: $(STAMP)
	$(BIN)/pytest -q -n $(TEST_WORKERS) tests

lint: $(STAMP)
	$(BIN)/ruff check harness tests bench e2e
	$(BIN)/ruff format --check harness tests bench e2e

typecheck: $(STAMP)
	$(BIN)/mypy

# shellcheck over the shell scripts (a system package, not in the venv: apt-get install
# shellcheck on Debian/Ubuntu, brew install shellcheck on macOS).
SHELL_SCRIPTS = scripts/*.sh .ci/run
shellcheck:
	@command -v shellcheck >/dev/null 2>&1 || { echo "make shellcheck: shellcheck is not" \
	  "installed: apt-get update && apt-get install -y shellcheck (Debian/Ubuntu)," \
	  "brew install shellcheck (macOS)" >&2; exit 2; }
	shellcheck $(SHELL_SCRIPTS)

check: lint typecheck shellcheck

# make compare [FUSED=url|dir UNFUSED=url|dir] [REPEATS=n] [MODEL=name] [AA=1] [STREAM=on|both] [SCENARIOS=dir|bfcl:multi_turn_base]
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
	  echo "make compare: UNFUSED= is missing: give the baseline, a URL or a recording's folder" >&2; \
	  echo "  (one box: make record UNFUSED=url, stop it, start the fused build, then" >&2; \
	  echo "  make compare UNFUSED=results/<id> FUSED=url), or AA=1 to compare FUSED with itself," >&2; \
	  echo "  or neither for the built-in reference servers" >&2; exit 2; fi
	@if [ -n "$(UNFUSED)" ] && [ -z "$(FUSED)" ] && [ -z "$(AA)" ]; then \
	  case "$(UNFUSED)" in http://*|https://*) \
	    echo "make compare: FUSED= is missing: give both servers (make compare FUSED=url UNFUSED=url)," >&2; \
	    echo "  or AA=1 to compare UNFUSED with itself, or neither URL for the built-in reference servers" >&2;; \
	  *) echo "make compare: FUSED= is missing: give the candidate to compare against the recording" >&2; \
	    echo "  (make compare UNFUSED=$(UNFUSED) FUSED=url, or FUSED= another recording's folder)" >&2;; \
	  esac; exit 2; fi
	@echo "harness compare $(COMPARE_ARGS)"
	@$(HARNESS) compare $(COMPARE_ARGS)

# One server at a time (one GPU box): record the unfused build, stop it, start the fused
# build, compare against the recording:
#   make record UNFUSED=http://127.0.0.1:30000            # prints the recording's folder
#   make compare UNFUSED=results/<id> FUSED=http://127.0.0.1:30000
# (UNFUSED and FUSED each take a URL or a recording's folder; LABEL= names the recording.)
LABEL ?=
RECORD_URL = $(or $(UNFUSED),$(FUSED))
RECORD_LABEL = $(or $(LABEL),$(if $(UNFUSED),unfused,fused))
RECORD_ARGS = $(strip --target $(RECORD_URL) --label $(RECORD_LABEL) \
  $(if $(REPEATS),--repeats $(REPEATS)) $(if $(MODEL),--model $(MODEL)) \
  $(if $(STREAM),--stream $(STREAM)) $(SCENARIOS))

record: $(STAMP)
	@if [ -z "$(RECORD_URL)" ]; then \
	  echo "make record: give the server to record: make record UNFUSED=url (or FUSED=url)" >&2; exit 2; fi
	@echo "harness record $(RECORD_ARGS)"
	@$(HARNESS) record $(RECORD_ARGS)

# The harness's own speed and scale (bench/): one table, JSON under results/bench/.
# BENCH_ARGS="--quick" for a smoke run, "--only 1,3" for some benchmarks (~5 min in full).
# Its figures go to docs/benchmarks.md (bench/bench.json, the latest run).
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS) --out results/bench
	$(BIN)/python -m bench.bench_table --from "$$(ls -t results/bench/bench-*.json | head -n 1)"

# The decision rules' false alarms and detection power at the shipped defaults
# (bench/calibration/): compare's (power.py, ~60 min of CPU with the recorded-baseline
# part; POWER_ARGS="--workers 2" for two processes, "--parts aa" for one part) and the
# numerics rule's (logprobs.py, 10-45 min by load), and the numerics paths' together live
# and recorded (paths.py, about 40 min idle). JSON in bench/calibration/*.json;
# the tables in docs/verdict.md, docs/recorded-baselines.md and docs/numerics.md.
POWER_ARGS ?=
calibrate: $(STAMP)
	$(BIN)/python -m bench.calibration.power --json bench/calibration/power.json $(POWER_ARGS) > /dev/null
	$(BIN)/python -m bench.calibration.logprobs --aa 40 --regression 40 --benign 40 --json bench/calibration/logprobs.json
	$(BIN)/python -m bench.calibration.numerics_rule
	$(BIN)/python -m bench.calibration.paths --json bench/calibration/paths.json > /dev/null
	$(BIN)/python -m bench.calibration.power_table bench/calibration/power.json

# End to end on a real server: upstream llama-server + SmolLM2-135M on the CPU (scripts/e2e.sh).
# The llama-cpp-python wheel and llama-server (from the llama.cpp tree in its sdist) are
# built once into $(HARNESS_E2E_CACHE) (~/.cache/harness-e2e); E2E_ARGS="..." for the driver.
# E2E_ARGS=--prepare only installs and builds (warms the cache), says what it has, exits 0.
e2e: $(STAMP)
	VENV=$(VENV) bash scripts/e2e.sh

# The panel: the full vLLM part (docs/e2e-vllm.md; make e2e runs its lean part), and the
# MoE panel (e2e/panel.py; docs/moe-panel.md): the SmolLM2 MoE on llama-server against
# faults and benign changes, numerics (5 repeats, 20 for the A/A) and behaviour, with
# llama-perplexity's KLD beside ours; then e2e/panel.json and the page. PANEL_ARGS: more
# options of python -m e2e.panel (--repeats, --aa-repeats, --behaviour-repeats, --only).
PANEL_ARGS ?=
PANEL_OUT ?= results/moe-panel
e2e-panel: $(STAMP)
	VENV=$(VENV) bash scripts/e2e.sh --prepare
	HARNESS_LLAMA_SERVER=$$(VENV=$(VENV) bash scripts/build-llama-server.sh) \
	  $(BIN)/python -m e2e.panel --out $(PANEL_OUT) $(PANEL_ARGS) \
	  --perplexity $$(VENV=$(VENV) bash scripts/build-llama-server.sh llama-perplexity)
	$(BIN)/python -m e2e.panel --publish $(PANEL_OUT)/panel.json
	VENV=$(VENV) bash scripts/e2e.sh --only-vllm --vllm-full

# The documentation site (mkdocs.yml, docs/) into site/: the generated pages first
# (commands, failure kinds, scenario reference), then `mkdocs build --strict`.
docs: $(STAMP)
	$(BIN)/python -m harness.docgen docs
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf site $(VENV) .pytest_cache .mypy_cache .ruff_cache
