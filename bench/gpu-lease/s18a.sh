#!/bin/bash
# Session 18, call 1: the whole ops / kernels suites and the hybrid golden tests on the final
# binary of session 17 (its 3-8 token warp GEMV mends were never run on the GPU), then tg128 /
# batched 4 and 8 on the 8B and 27B Q4_0 shapes as a regression check.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 200 $B/hs_unit_tests --gtest_filter='BackendOps*:AttentionOps*:SparseAttentionOps*:HybridOps*:QuantGemv*:QuantWarpGemv*:GemvWarp*:Gemm16Mma*:FlashPrefill*:DecodeAttention*:Bias*:QuantLayout*:RmsNormKernel*:*HybridGolden*cuda*:SparseHybrid*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/ops.log | head -20
for cfg in llama-3.1-8b qwen3.5-27b; do
  timeout 150 $B/hindsight bench --device cuda --load-format dummy --config configs/$cfg.json --dummy-dtype q4_0 \
    -p 0 -n 128 -d 0 -r 2 --batched 4:64 --batched 8:64 --batched-gen 32 --json $OUT/$cfg.json > $OUT/$cfg.log 2>&1
  echo "$cfg rc $?"; grep -E "tg128|batched" $OUT/$cfg.log | head
done
