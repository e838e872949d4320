#!/bin/bash
# Session 17, call 6: the dp2a warp GEMV for 3-8 tokens of Q4_0 / Q8_0 (chunks of 4 tokens, the
# per-token scales loaded per block: no spills), A/B against the tensor-core GEMV
# (HS_CUDA_QW_ROWS=2 = before) on batched 4 / 8 decode of the 27B and 8B shapes; its tests.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 200 $B/hs_unit_tests --gtest_filter='QuantWarpGemv*:BackendOps*:HybridOps*:*HybridGolden*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/ops.log | head -20
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0"
C8q8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q8_0"
for r in 2 8 2 8; do
  for c in C27 C8 C8q8; do
    HS_CUDA_QW_ROWS=$r timeout 80 $B/hindsight bench ${!c} -p 0 -n 0 -d 0 -r 1 --no-peaks \
      --batched 4:64 --batched 8:64 --batched-gen 32 > $OUT/b_${r}_$c.log 2>&1
    echo "rows $r $c: $(grep '^|' $OUT/b_${r}_$c.log | grep batched | cut -d'|' -f9,11 | tr '\n' ' ')"
  done
done
