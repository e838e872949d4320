#!/bin/bash
# Session 17, call 3: where batch-8 decode of the 27B shape goes (eager per-op profile of
# --batched 8:512 and of batch 1 for comparison; the 8B shape's batch 8 beside it).
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0"
HS_CUDA_PROFILE=1 timeout 120 $B/hindsight bench $C27 -p 0 -n 16 -d 0 -r 1 --no-peaks > $OUT/prof1.log 2>&1
HS_CUDA_PROFILE=1 timeout 120 $B/hindsight bench $C27 -p 0 -n 0 -d 0 -r 1 --no-peaks --batched 8:64 --batched-gen 16 > $OUT/prof8.log 2>&1
HS_CUDA_PROFILE=1 timeout 120 $B/hindsight bench $C8 -p 0 -n 0 -d 0 -r 1 --no-peaks --batched 8:64 --batched-gen 16 > $OUT/prof8_8b.log 2>&1
for f in prof1 prof8 prof8_8b; do echo "== $f"; sed -n '/cuda op profile/,$p' $OUT/$f.log | head -28; done
