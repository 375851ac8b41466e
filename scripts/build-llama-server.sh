#!/usr/bin/env bash
# Build upstream llama.cpp's `llama-server` once per machine, from the llama.cpp tree
# vendored in the llama-cpp-python sdist (MIT; PyPI is the only source CI can reach),
# and print the path of the cached binary on stdout (everything else goes to stderr).
#
#   scripts/build-llama-server.sh            # -> ~/.cache/harness-e2e/llama-server/<key>/llama-server
#   scripts/build-llama-server.sh llama-perplexity   # another target of the same tree, same key
#                                            # (the MoE panel's full-vocabulary KLD reference)
#
# The cache key is the sdist version plus a hash of the configure flags, so a change of
# either builds a new binary beside the old one (nothing shared is overwritten).
# Configure flags: -DGGML_NATIVE=OFF (a -march=native build of the same tree crashed here
# on its first generation), the web UI off and no download of prebuilt UI assets
# (LLAMA_BUILD_UI=OFF, LLAMA_USE_PREBUILT_UI=OFF), static libraries (the binary stands
# alone in the cache), no OpenSSL (nothing is fetched over HTTPS), only the llama-server
# target (or the one named as the first argument: llama-server or llama-perplexity).
#
# Environment:
#   VENV                 venv whose pip downloads the sdist (default .venv)
#   HARNESS_E2E_CACHE    cache root (default ~/.cache/harness-e2e)
#   E2E_LLAMA_CPP_VERSION  llama-cpp-python sdist version (default 0.3.36, tested)
#   E2E_BUILD_JOBS       parallel compile jobs (default 2)
# Exit: 0 the binary exists (built or cached); 2 the download or the build failed: one
#       line on stderr naming the step and the log.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY="${VENV:-.venv}/bin/python"
CACHE=${HARNESS_E2E_CACHE:-$HOME/.cache/harness-e2e}
VERSION=${E2E_LLAMA_CPP_VERSION:-0.3.36}
JOBS=${E2E_BUILD_JOBS:-2}
TARGET=${1:-llama-server}
case "$TARGET" in llama-server | llama-perplexity) ;; *)
  echo "e2e: FAILED: build-llama-server.sh: unknown target $TARGET (llama-server or llama-perplexity)" >&2
  exit 2 ;;
esac
# llama-server keeps the names it always had; another target's log and build.txt carry its name
SUFFIX=""
[ "$TARGET" = llama-server ] || SUFFIX="-${TARGET#llama-}"
FLAGS="-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_BUILD_UI=OFF \
-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF"
KEY="$VERSION-$(printf '%s' "$FLAGS" | sha256sum | cut -c1-10)"
HOME_DIR="$CACHE/llama-server"
OUT="$HOME_DIR/$KEY"
LOG="$HOME_DIR/logs/build-$KEY$SUFFIX.log"

# The build's scratch folder: global, so that the EXIT trap (which runs after build() has
# returned, when its locals are gone) still sees it; empty when there is nothing to remove.
WORK=""
trap 'rm -rf "${WORK:-/nonexistent}"' EXIT

fail() {
  echo "e2e: FAILED: $1 (log: $LOG)" >&2
  exit 2
}

build() {
  local work t0 t1
  WORK=$(mktemp -d "$HOME_DIR/build-$KEY.XXXXXX")
  work=$WORK
  echo "e2e: building $TARGET from llama-cpp-python $VERSION's vendored llama.cpp" \
    "($JOBS jobs; ~5 min on 2 idle cores, more under load; log: $LOG)" >&2
  t0=$(date +%s)
  local sdist="$HOME_DIR/sdist/llama_cpp_python-$VERSION.tar.gz"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); flags: $FLAGS" >"$LOG"
  if [ ! -f "$sdist" ]; then
    "$PY" -m pip download -q --no-deps --no-binary llama-cpp-python \
      --dest "$HOME_DIR/sdist" "llama-cpp-python==$VERSION" >>"$LOG" 2>&1 \
      || fail "downloading the llama-cpp-python $VERSION sdist failed"
  fi
  tar -xzf "$sdist" -C "$work" >>"$LOG" 2>&1 \
    || fail "unpacking the llama-cpp-python $VERSION sdist failed"
  # shellcheck disable=SC2086  # FLAGS is a list of words
  { cmake -S "$work/llama_cpp_python-$VERSION/vendor/llama.cpp" -B "$work/build" $FLAGS \
      && cmake --build "$work/build" --target "$TARGET" -j "$JOBS"; } >>"$LOG" 2>&1 \
    || fail "building $TARGET $KEY failed"
  t1=$(date +%s)
  mkdir -p "$OUT"
  cp "$work/build/bin/$TARGET" "$OUT/$TARGET.tmp" && mv "$OUT/$TARGET.tmp" "$OUT/$TARGET"
  INFO="$OUT/build$SUFFIX.txt"
  echo "$((t1 - t0)) s wall; load after: $(cut -d' ' -f1-3 /proc/loadavg); $FLAGS" >"$INFO"
  cat "$INFO" >>"$LOG"
  rm -rf "$work"
  WORK=""
  echo "e2e: built $TARGET in $((t1 - t0)) s" >&2
}

mkdir -p "$HOME_DIR/logs" "$HOME_DIR/sdist"
# one build at a time per machine (a lock of its own: the wheel build keeps build.lock)
exec 8>"$HOME_DIR/build.lock"
flock 8
if [ -x "$OUT/$TARGET" ]; then
  echo "e2e: cached $TARGET $KEY ($(cut -d';' -f1 "$OUT/build$SUFFIX.txt" 2>/dev/null || echo '?'))" >&2
else
  if ! command -v cmake >/dev/null; then  # PyPI's cmake wheel, as the wheel build would use
    "$PY" -m pip install -q cmake >"$LOG" 2>&1 || fail "cmake is missing and pip install cmake failed"
    PATH="$(dirname "$PY"):$PATH"
  fi
  build
fi
flock -u 8
echo "$OUT/$TARGET"
