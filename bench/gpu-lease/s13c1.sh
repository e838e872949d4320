#!/bin/bash
# Session 13, call 1: unpack the bundle (HS_BUNDLE, default .gpu/b7), and
# run the CUDA op tests including the new GPU sparse attention ones (SparseAttentionOps).
mkdir -p /root/stage/m && tar xzf ${HS_BUNDLE:-.gpu/b7}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 300 $H/hs_unit_tests --gtest_filter='SparseAttentionOps.*' > $OUT/sparse_ops.txt 2>&1; echo "sparse ops rc $?"
grep -E "^\[  |sparse select|Failure|error|Expected|Which is|actual|seed" $OUT/sparse_ops.txt | head -40
timeout 240 $H/hs_unit_tests --gtest_filter='BackendOps.*:AttentionOps.*:BackendOpsFp8.*:BiasOps.*:Gemm16Mma.*:GemvWarp.*:QuantWarp*:QuantGemv.*:QuantLayout.*:RmsNormKernel.*:DecodeAttention.*:FlashPrefill.*' > $OUT/ops.txt 2>&1; echo "ops rc $?"
grep -E "FAILED|PASSED|tests ran" $OUT/ops.txt | head -20
date +%T
