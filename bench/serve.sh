#!/usr/bin/env bash
# bench/serve.sh — serving benchmarks of `hindsight serve` (the lead runs these; slow).
#
#   bench/serve.sh [MODEL.gguf] [serve_bench.py options]
#       aiperf (NVIDIA, PyPI) drives the server with streaming chat requests at concurrency
#       1, 4, 8, 16 (ISL 256, OSL 128 by default): TTFT / TPOT / ITL p50/p90/p99, throughput.
#       Prints a markdown table, writes bench/results/serve-<time>.json.
#   bench/serve.sh fairness [MODEL.gguf] [fairness.py options]
#       p99 ITL of 4 running streams during a 16K-token prefill vs without it
#       (e.g. --prefill-cost-ratio 0 for the token budget only). bench/results/fairness-*.json.
#
# Installs bench/requirements-bench.txt into .venv-bench once (again when the file changes).
# Builds nothing: uses $HS_BIN (default build/bin/hindsight; `make build` first).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=serve
if [ "${1:-}" = fairness ]; then mode=fairness; shift; fi
model=models/smollm2-135m-instruct-q4_1.gguf
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then model=$1; shift; fi
[ -f "$model" ] || { echo "model $model not found (scripts/setup fetches the default)" >&2; exit 1; }
export HS_BIN=${HS_BIN:-$PWD/build/bin/hindsight}
[ -x "$HS_BIN" ] || { echo "$HS_BIN not found (make build)" >&2; exit 1; }

VENV=.venv-bench
REQ=bench/requirements-bench.txt
STAMP=$VENV/.req-stamp
if [ ! -x $VENV/bin/python ]; then
  echo "[serve.sh] creating $VENV" >&2
  "${PYTHON:-python3}" -m venv $VENV
fi
if [ ! -f "$STAMP" ] || ! cmp -s "$REQ" "$STAMP"; then
  echo "[serve.sh] installing $REQ into $VENV (first time: a few minutes)" >&2
  $VENV/bin/pip install -q --upgrade pip
  $VENV/bin/pip install -q -r "$REQ"
  cp "$REQ" "$STAMP"
fi

# No HF_HUB_OFFLINE: with it aiperf 0.13 looks a local tokenizer path up in the hub cache and
# fails; without it a local path is loaded directly (bench/hf_tokenizer.py makes one).
export TOKENIZERS_PARALLELISM=false
if [ $mode = fairness ]; then
  exec $VENV/bin/python bench/fairness.py --model "$model" "$@"
fi
exec $VENV/bin/python bench/serve_bench.py --model "$model" "$@"
