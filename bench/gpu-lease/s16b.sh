#!/bin/bash
# Session 16, call 2: the quantized GEMV's K split (gemv_quant_warp.cu) and 4 weights a launch.
# Carried .gpu/bundle. Op tests of the quantized GEMV + HybridOps + hybrid golden, then A/B
# (HS_CUDA_KSPLIT=0 / default) on the 27B shape and the Llama-3.1-8B shape, Q4_0, batch 1.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 200 $B/hs_unit_tests --gtest_filter='QuantWarpGemv*:HybridOps*:*HybridGolden*:BackendOps*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |golden\].*cuda" $OUT/ops.log | head -20
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0"
for ks in 0 1; do
  HS_CUDA_KSPLIT=$ks timeout 100 $B/hindsight bench $C27 -p 0 -n 128 -d 0 -r 2 > $OUT/k27_$ks.log 2>&1
  HS_CUDA_KSPLIT=$ks timeout 100 $B/hindsight bench $C8 -p 0 -n 128 -d 0 -r 3 > $OUT/k8_$ks.log 2>&1
  echo "KSPLIT=$ks"; grep -h "tg128" $OUT/k27_$ks.log $OUT/k8_$ks.log | cut -d'|' -f9,11,12
done
HS_CUDA_PROFILE=1 timeout 100 $B/hindsight bench $C27 -p 0 -n 32 -d 0 -r 1 > $OUT/prof1.log 2>&1
grep -A16 "cuda op profile" $OUT/prof1.log
