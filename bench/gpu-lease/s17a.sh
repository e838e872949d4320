#!/bin/bash
# Session 17, call 1: the delta-rule prologue fused only for steps of <= 64 tokens (A/B of
# HS_CUDA_DELTA_FUSED_MAX on pp512 / tg128), sparse attention on the hybrid's full-attention
# layers on the GPU (the 27B shape, dense vs sparse at depth), the op / golden tests.
# Carried .gpu/bundle.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 220 $B/hs_unit_tests --gtest_filter='QuantWarpGemv*:HybridOps*:*HybridGolden*:BackendOps*:SparseAttention*:SparseHybrid*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/ops.log | head -20
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
for f in 0 64 100000; do
  HS_CUDA_DELTA_FUSED_MAX=$f timeout 90 $B/hindsight bench $C27 -p 512 -n 128 -d 0 -r 2 > $OUT/ab$f.log 2>&1
  echo "fused max $f:"; grep "^|" $OUT/ab$f.log | grep -E "pp512|tg128" | cut -d'|' -f9,11,12
done
timeout 200 $B/hindsight bench $C27 -p 0 -n 64 -d 32768 -d 131072 -r 2 -c 140000 --sparse sketch --sketch random \
  --sparse-compare --json $OUT/sp27.json > $OUT/sp27.log 2>&1; echo "sparse bench rc $?"
grep "^|" $OUT/sp27.log | head -12
tail -3 $OUT/sp27.log
