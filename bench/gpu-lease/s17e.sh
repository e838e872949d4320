#!/bin/bash
# Session 17, call 5: the final binary's hybrid golden / sparse-hybrid / GEMV tests on CUDA, and
# the 27B-shape rows (dense) with this session's defaults.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 200 $B/hs_unit_tests --gtest_filter='*HybridGolden*:SparseHybrid*:QuantWarpGemv*:HybridOps*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |golden\].*cuda.*(KL|graph)" $OUT/ops.log | head -12
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
timeout 300 $B/hindsight bench $C27 -p 512 -n 128 -d 0 -r 2 --batched 8:512 --batched 32:512 --batched 8:32768 \
  --batched-gen 128 --json $OUT/h27.json > $OUT/h27.log 2>&1; echo "bench rc $?"
grep "^|" $OUT/h27.log | cut -d'|' -f9,11,12
