#!/usr/bin/env bash
# bench/vs-llamacpp.sh — hindsight bench vs llama.cpp's llama-bench on the same GGUF, same
# tests (pp512, tg128, tg128 @ d4096, d16384), same threads; prints both tables and ratios.
# Dense against dense: hindsight runs with --sparse off, as llama.cpp has no sparse path. When
# a sketch file sits beside the model, hindsight's sparse decode at the same depths follows as
# its own rows, labelled "sparse", against the same llama.cpp (dense) numbers.
# HS_BIN=PATH times another hindsight binary (e.g. a build of an earlier commit).
#
# llama.cpp is built from the source vendored in the `llama-cpp-python` sdist on PyPI
# (pinned below), cached in .cache/llama.cpp (git-ignored); the first run takes minutes.
# Usage: bench/vs-llamacpp.sh [MODEL] [extra args for both, e.g. -r 3]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODEL=${1:-models/smollm2-135m-instruct-q4_1.gguf}
shift || true
LCP_VERSION=${LCP_VERSION:-0.3.36}
CACHE=$ROOT/.cache/llama.cpp
THREADS=${THREADS:-$(nproc)}
DEPTHS=${DEPTHS:-0,4096,16384}
REPS=${REPS:-3}

if [ ! -x "$CACHE/build/bin/llama-bench" ]; then
  mkdir -p "$CACHE"
  if [ ! -d "$CACHE/src" ]; then
    echo "[vs-llamacpp] fetching llama-cpp-python==$LCP_VERSION sdist from PyPI" >&2
    .venv/bin/pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LCP_VERSION" -d "$CACHE/dl"
    tar -xzf "$CACHE"/dl/llama_cpp_python-*.tar.gz -C "$CACHE"
    mv "$CACHE"/llama_cpp_python-*/vendor/llama.cpp "$CACHE/src"
  fi
  echo "[vs-llamacpp] building llama-bench (CPU, native)" >&2
  cmake -S "$CACHE/src" -B "$CACHE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
  cmake --build "$CACHE/build" --target llama-bench -j "${BUILD_JOBS:-$(nproc)}" >/dev/null
fi

HS=${HS_BIN:-build/bin/hindsight}
[ -x "$HS" ] || make build >/dev/null
OUTDIR=$ROOT/.cache/bench
mkdir -p "$OUTDIR"
echo "[vs-llamacpp] llama-bench" >&2
"$CACHE/build/bin/llama-bench" -m "$MODEL" -p 512 -n 128 -d "$DEPTHS" -t "$THREADS" -r "$REPS" -o json "$@" > "$OUTDIR/llamacpp.json"
echo "[vs-llamacpp] hindsight bench" >&2
"$HS" bench -m "$MODEL" -p 512 -n 128 -d ${DEPTHS//,/ } -t "$THREADS" -r "$REPS" --sparse off \
  --json "$OUTDIR/hindsight.json" "$@" >/dev/null
SPARSE_JSON=()
if [ -f "${MODEL%.gguf}.sketch.safetensors" ]; then
  echo "[vs-llamacpp] hindsight bench, sparse decode (the sketch beside the model)" >&2
  "$HS" bench -m "$MODEL" -p 0 -n 128 -d ${DEPTHS//,/ } -t "$THREADS" -r "$REPS" --sparse sketch \
    --json "$OUTDIR/hindsight-sparse.json" "$@" >/dev/null
  SPARSE_JSON=("$OUTDIR/hindsight-sparse.json")
fi
.venv/bin/python bench/compare_llamacpp.py "$OUTDIR/hindsight.json" "$OUTDIR/llamacpp.json" "$MODEL" "${SPARSE_JSON[@]}"
