#!/bin/bash
# Session 25, first call (carry .gpu/bundle): unpack; the quantized GEMM's suites with its
# barrier-free variant now the default for 5-8 rows; its A/B on the Llama-3.1-8B shape (Q4_0)
# at batch 8, where session 25 measured it only on the Qwen3.5-27B shape.
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 200 $B/hs_unit_tests --gtest_filter='QuantGemv.*:BackendOps*:HybridOps*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/tests.log | head; grep -A6 "Failure" $OUT/tests.log | head -20
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0"
for v in 0 1; do
  HS_CUDA_GEMMQ_WARP=$v timeout 100 $B/hindsight bench $C8 -p 0 -n 0 -r 2 --batched 8:512 --batched 32:512 --batched-gen 128 \
    > $OUT/w8b-$v.log 2>&1; echo "8B GEMMQ_WARP=$v rc $?"; grep "^| llama" $OUT/w8b-$v.log | cut -d'|' -f9-12
done
