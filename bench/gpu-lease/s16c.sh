#!/bin/bash
# Session 16, call 3: the K split removed again (it lost, s16b), 4 weights a quantized launch kept.
# Carried .gpu/bundle. Quantized GEMV + HybridOps + hybrid golden + backend op tests, then the
# 27B-shape rows (dummy Q4_0) and the 8B shape's tg128 Q4_0.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 200 $B/hs_unit_tests --gtest_filter='QuantWarpGemv*:HybridOps*:*HybridGolden*:BackendOps*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |golden\].*cuda" $OUT/ops.log | head -20
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0"
timeout 100 $B/hindsight bench $C8 -p 0 -n 128 -d 0 -r 3 > $OUT/k8.log 2>&1; grep "tg128" $OUT/k8.log | cut -d'|' -f9,11,12 | head -1
timeout 300 $B/hindsight bench $C27 -p 512 -n 128 -d 0 -r 2 --batched 8:512 --batched 32:512 --batched 8:32768 \
  --batched-gen 128 --json $OUT/h27.json > $OUT/h27.log 2>&1; echo "bench rc $?"
grep "^|" $OUT/h27.log | cut -d'|' -f9,11,12
