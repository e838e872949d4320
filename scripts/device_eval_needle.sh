#!/bin/bash
# scripts/device_eval_needle.sh — runs `hindsight eval needle` matrices on the device machine's
# CPUs (16 cores against this box's 2), so a 32K matrix of seeds × selectors takes minutes.
#
# The model cannot travel in one call (64 MiB a call), so it goes in parts on a warm machine:
#   here:   mkdir -p .devmodel && split -b 58M -d models/gemma-3-270m-q4_k_m.gguf .devmodel/gemma.part
#           .devbundle/ = build/bin/hindsight, its shared libraries (lib/), the sketch file and
#           doc.tgz (the .md/.txt files of /usr/share/doc: the eval's default haystack, so the
#           device sees the same haystack as this box); both folders in .git/info/exclude.
#   device: scripts/device_eval_needle.sh stage .devmodel/gemma.part00   (one call per part)
#           scripts/device_eval_needle.sh setup                          (checks the sha256)
#           scripts/device_eval_needle.sh start NAME "ARGS" [NAME "ARGS" ...]
#           scripts/device_eval_needle.sh status     (answers so far, per run)
#           scripts/device_eval_needle.sh collect    (logs + JSON to $OUT)
# Each run is `hindsight eval needle -m MODEL -v --json NAME.json ARGS` in its own session
# (setsid), so it outlives the call that starts it. The CPU results are the eval's, not GPU
# results; docs/benchmarks.md names the machine they ran on.
set -euo pipefail

M=/root/m
RES=${HS_RES:-/root/res}
MODEL_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

case "${1:-}" in
  stage)
    mkdir -p "$M"
    mv "$2" "$M/"
    ls -la "$M"
    ;;
  setup)
    cat "$M"/gemma.part* > "$M/gemma-3-270m-q4_k_m.gguf"
    echo "$MODEL_SHA  $M/gemma-3-270m-q4_k_m.gguf" | sha256sum -c -
    cp .devbundle/gemma-3-270m-q4_k_m.sketch.safetensors "$M/"
    mkdir -p /root/hs && cp -r .devbundle/hindsight .devbundle/lib /root/hs/
    if [ ! -d /usr/share/doc.device ]; then mv /usr/share/doc /usr/share/doc.device; fi
    rm -rf /usr/share/doc && tar xzf .devbundle/doc.tgz -C /
    LD_LIBRARY_PATH=/root/hs/lib /root/hs/hindsight --version || true
    nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
    ;;
  start)
    shift
    mkdir -p "$RES"
    while [ $# -ge 2 ]; do
      name=$1 args=$2
      shift 2
      # shellcheck disable=SC2086
      (cd /root && LD_LIBRARY_PATH=/root/hs/lib setsid /root/hs/hindsight eval needle -m "$M/gemma-3-270m-q4_k_m.gguf" \
        -v --json "$RES/$name.json" $args > "$RES/$name.log" 2>&1 < /dev/null &)
      echo "started $name: $args"
    done
    ;;
  status)
    for f in "$RES"/*.log; do
      python3 - "$f" <<'EOF'
import re, sys
f = sys.argv[1]
ans = {}
for line in open(f, errors="replace"):
    m = re.match(r'\[([^\]]+)\] (.+?) → expected (\d+), got "(.*)"$', line.rstrip("\n"))
    if m:
        cfg, city, exp, got = m.groups()
        num = re.search(r"\d{7,}", got)
        ans.setdefault(cfg, {})[city] = (exp, got, num.group(0) if num else "")
d = ans.get("dense", {})
done = "done" if any(l.startswith("{") for l in open(f, errors="replace")) else "running"
print(f.split("/")[-1], done, " | ".join(
    f"{c}: {sum(1 for k, (e, g, n) in a.items() if e in g)}/{len(a)} same# "
    f"{sum(1 for k, (e, g, n) in a.items() if k in d and n == d[k][2])}" for c, a in ans.items()))
EOF
    done
    ;;
  collect)
    tar czf "$OUT/res.tgz" -C "$RES" .
    ls -la "$RES"
    ;;
  *)
    echo "usage: $0 stage FILE | setup | start NAME ARGS ... | status | collect" >&2
    exit 2
    ;;
esac
