#!/bin/bash
# Session 26: issue 14's attribution rows at 8 x 256K (int4 host tier, Q4_0 weights, binaries in
# /root/st from s29a.sh; B= overrides), one call after s29c.sh: the hit path is s29c.sh's q4b8;
# here the real-text miss rate (HS_CUDA_HOT_FORCE_MISS=0.282, docs/benchmarks.md session 20) and
# every selected piece a miss (1.0: the worst case the issue asks for), then the hierarchical
# scoring off (--sparse-page-shortlist 0: every candidate's sketch scored) on the hit path.
date -u +"%F %T UTC"
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0 -p 0 -r 1 --sparse sketch
   --sketch random:16 --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 -n 0 --batched 8:262144
   --batched-gen 32"
run() { local name=$1; shift; timeout ${T:-120} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|device sparse|rror" $OUT/$name.log | cut -c1-260 | head -4; }
HS_CUDA_HOT_FORCE_MISS=0.282 run q4b8_m282
HS_CUDA_HOT_FORCE_MISS=1 run q4b8_m100
run q4b8_flat --sparse-page-shortlist 0
date -u +"%F %T UTC"
