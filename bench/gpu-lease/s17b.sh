#!/bin/bash
# Session 17, call 2: the batch-1 quantized GEMV compiled for 3 CTAs an SM (24 warps) — A/B of
# HS_CUDA_QW_CTAS (2 = before, 3, 3r1) on the 8B and 27B shapes; the GEMV tests; the sparse rows
# of the 27B shape again (the bench's KV bytes by KV layer fixed), with 8 x 32K dense vs sparse.
# Carried .gpu/bundle.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 200 $B/hs_unit_tests --gtest_filter='QuantWarpGemv*:BackendOps*:HybridOps*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/ops.log | head -20
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0"
C8q8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q8_0"
for mode in 2 3 3r1 2 3; do
  echo "HS_CUDA_QW_CTAS=$mode:"
  for c in C8 C8q8 C27; do
    HS_CUDA_QW_CTAS=$mode timeout 80 $B/hindsight bench ${!c} -p 0 -n 128 -d 0 -r 3 --no-peaks > $OUT/qw_${mode}_$c.log 2>&1
    echo "  $c $(grep tg128 $OUT/qw_${mode}_$c.log | cut -d'|' -f11)"
  done
done
timeout 240 $B/hindsight bench $C27 -p 0 -n 64 -d 131072 -r 2 -c 300000 --sparse sketch --sketch random \
  --sparse-compare --batched 8:32768 --batched-gen 64 --json $OUT/sp27.json > $OUT/sp27.log 2>&1; echo "sparse bench rc $?"
grep "^|" $OUT/sp27.log | cut -d'|' -f9- | head -12
