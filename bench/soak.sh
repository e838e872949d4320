#!/usr/bin/env bash
# bench/soak.sh [MODEL] — the soak of issue 17 (deliverable 4): starts `hindsight serve` on MODEL
# (default SmolLM2), drives it with bench/soak.py (16 mixed clients: streams, cancels, invalid
# requests, long prompts) for SOAK_SECONDS (default 3600), sampling RSS / fds / threads / pools
# every SOAK_SAMPLE seconds (default 60), stops the server with SIGTERM, then draws the samples
# (bench/soak_plot.py; matplotlib into .venv-bench on first use). Output in bench/results/soak-<date>/:
# samples.jsonl (the last line is the summary), server.log, meta.txt (commit, binary, machine, load
# average, exit statuses), soak.png. HS_BIN picks the binary (default build/bin/hindsight; point it
# at a private copy so a rebuild during the hour cannot touch it). Exit status: soak.py's
# (non-zero when a valid request failed), else the server's.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/smollm2-135m-instruct-q4_1.gguf}
SECONDS_TOTAL=${SOAK_SECONDS:-3600}
SAMPLE=${SOAK_SAMPLE:-60}
PORT=${SOAK_PORT:-18181}
OUT=bench/results/soak-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$OUT"
BIN=${HS_BIN:-build/bin/hindsight}
{ echo "start $(date -u +%FT%TZ)  commit $(git rev-parse --short HEAD)  bin $BIN  model $MODEL"
  echo "machine: $(nproc) cores, $(uname -srm), load at start: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$OUT/meta.txt"
"$BIN" serve -m "$MODEL" --port "$PORT" -t 2 --max-num-seqs 16 > "$OUT/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
  sleep 0.5
done
rc=0
.venv/bin/python bench/soak.py --url "http://127.0.0.1:$PORT" --pid "$PID" --duration "$SECONDS_TOTAL" \
  --sample "$SAMPLE" --out "$OUT/samples.jsonl" || rc=$?
kill -TERM "$PID" || echo "soak: the server was already gone" >&2
srv_rc=0
wait "$PID" || srv_rc=$?
trap - EXIT
echo "end $(date -u +%FT%TZ)  soak.py rc $rc  server exit $srv_rc  load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/meta.txt"
[ "$rc" -ne 0 ] || rc=$srv_rc
if [ ! -x .venv-bench/bin/python ]; then python3 -m venv .venv-bench; fi
.venv-bench/bin/python -c "import matplotlib" 2>/dev/null || .venv-bench/bin/pip install -q matplotlib==3.10.3
.venv-bench/bin/python bench/soak_plot.py "$OUT/samples.jsonl" "$OUT/soak.png"
echo "soak: $OUT (rc $rc)"
exit "$rc"
