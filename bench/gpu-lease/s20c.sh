#!/bin/bash
# Session 20, call 3: where a step of 8 x 256K (int4 host tier, rank-16 sketches) goes: the eager
# per-op profile (HS_CUDA_PROFILE=1); then Q4_0 weights at the real-text miss rate, and every
# piece a miss (bf16 weights).
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json -p 0 -n 0 -r 1 --sparse sketch --sketch random:16 --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 --batched 8:262144"
run() { local name=$1; shift; timeout ${T:-150} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|forced" $OUT/$name.log | cut -c1-300 | head -6; }
HS_CUDA_PROFILE=1 T=150 run prof --dummy-dtype bf16 --batched-gen 16
grep -vE "^\[|^$" $OUT/prof.log | grep -iE "us|ms|%" | head -40
HS_CUDA_HOT_FORCE_MISS=0.282 run q40_m282 --dummy-dtype q4_0 --batched-gen 64
HS_CUDA_HOT_FORCE_MISS=1 run bf16_miss --dummy-dtype bf16 --batched-gen 32
