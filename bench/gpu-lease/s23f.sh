#!/bin/bash
# Session 23: issue 14's rows on the current defaults (exact rerank 8x on the device tier, the
# hierarchical page shortlist, rank-32 random sketch; host tier: int4, rank 16, no rerank), then
# llama.cpp at 1 x 256K with q8_0 KV (its best long-context setting), same lease.
date -u +"%F %T UTC"
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 --sparse sketch"
run() { local name=$1; shift; timeout ${T:-120} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|device sparse|rror" $OUT/$name.log | cut -c1-260 | head -6; }
T=150 run d1 -n 32 -d 131072 262144 --sketch random --sparse-compare
T=80 run rr0 -n 32 -d 131072 262144 --sketch random --sparse-rerank 0
T=100 run b8 -n 0 --sketch random:16 --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 --batched 8:262144 --batched-gen 32
date -u +"%F %T UTC"
W=/tmp/peer; timeout 200 $W/build/bin/llama-bench -m $W/f16.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -p 0 -n 32 -d 262144 -r 1 -o md 2>/dev/null | tee $OUT/peer-256k-q8.md
date -u +"%F %T UTC"
