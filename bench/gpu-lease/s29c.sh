#!/bin/bash
# Session 26: issue 14's rows with 4-bit weights (the seeds' anchor is W4A16): the 8B shape with
# dummy Q4_0 weights, whose 5-128-row quantized GEMM (session 24) now beats bf16 at batch 8 (8B
# batch 8: Q4_0 1,926 t/s, bf16 ~1,140). Same rows as s23f.sh (binaries in /root/st from s29a.sh;
# B= overrides), then llama.cpp on its own Q4_0 8B (run.sh quant, ~20 s after gen) with q8_0 KV at
# 1 x 256K. Its 8 x 32K row: s29d.sh (one call each stays under 10 minutes).
date -u +"%F %T UTC"
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0 -p 0 -r 1 --sparse sketch"
run() { local name=$1; shift; timeout ${T:-120} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|device sparse|rror" $OUT/$name.log | cut -c1-260 | head -6; }
T=150 run q4d1 -n 32 -d 131072 262144 --sketch random --sparse-compare
T=120 run q4b8 -n 0 --sketch random:16 --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 --batched 8:262144 --batched-gen 32
date -u +"%F %T UTC"
W=/tmp/peer; [ -f $W/q4_0.gguf ] || bash .gpu/peer/run.sh quant 2>&1 | tail -1
timeout 200 $W/build/bin/llama-bench -m $W/q4_0.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -p 0 -n 32 -d 262144 -r 1 -o md 2>/dev/null | tee $OUT/peer-q4-256k-q8.md
date -u +"%F %T UTC"
