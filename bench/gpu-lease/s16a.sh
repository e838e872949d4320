#!/bin/bash
# Session 16, call 1: the register-resident delta rule (hybrid.cu) checked and timed. Carried
# .gpu/bundle. HybridOps + the hybrid golden on CUDA, then the Qwen3.5-27B shape (dummy Q4_0):
# an eager per-op profile of a short decode, and the bench rows of session 15's table.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 150 $B/hs_unit_tests --gtest_filter='HybridOps*:*HybridGolden*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED|^delta|golden\]" $OUT/ops.log | head -40
C="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
HS_CUDA_PROFILE=1 timeout 120 $B/hindsight bench $C -p 0 -n 32 -d 0 -r 1 > $OUT/prof1.log 2>&1
HS_CUDA_PROFILE=1 timeout 120 $B/hindsight bench $C -p 0 -n 0 -d 0 -r 1 --batched 32:64 --batched-gen 16 > $OUT/prof32.log 2>&1
grep -A30 "cuda op profile" $OUT/prof1.log | head -32; grep -A30 "cuda op profile" $OUT/prof32.log | head -32
timeout 300 $B/hindsight bench $C -p 512 -n 128 -d 0 -r 2 --batched 8:512 --batched 32:512 --batched 8:32768 \
  --batched-gen 128 --json $OUT/h27.json > $OUT/h27.log 2>&1; echo "bench rc $?"
grep "^|" $OUT/h27.log
