#!/bin/bash
# Session 24, first call of a lease (carry .gpu/bundle): the quantized tensor-core GEMM (9..128
# rows, gemm_quant_mma.cu): its kernel tests and the backend's matmul ops against the CPU, its
# weight-read rate (HS_GEMV_BENCH=1), then A/B rows in one process each (HS_CUDA_GEMMQ=0 is the
# old dequantize + cuBLAS path): the Qwen3.5-27B shape and the 8B shape with Q4_0 weights.
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 150 $B/hs_unit_tests --gtest_filter='QuantGemv.Gemm*:BackendOps.Matmul*:QuantGemv.*Reference*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |^gemm " $OUT/tests.log | head -30
grep -A6 "Failure" $OUT/tests.log | head -30
HS_GEMV_BENCH=1 timeout 90 $B/hs_unit_tests --gtest_filter='QuantGemv.GemmBandwidth' > $OUT/bw.log 2>&1; echo "bw rc $?"
grep -E "^Q|^w " $OUT/bw.log | head -100
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0 -p 0 -n 0 -r 1 --batched-gen 32"
for v in 0 1; do
  HS_CUDA_GEMMQ=$v timeout 150 $B/hindsight bench $C27 --batched 16:512 --batched 32:512 --batched 64:512 > $OUT/q27-$v.log 2>&1
  echo "27B GEMMQ=$v rc $?"; grep "^| qwen" $OUT/q27-$v.log | cut -d'|' -f9-12
done
HS_CUDA_GEMMQ_MIN=3 HS_CUDA_QW_ROWS=2 timeout 100 $B/hindsight bench $C27 --batched 4:512 --batched 8:512 > $OUT/q27-min3.log 2>&1
echo "27B GEMM from 3 rows rc $?"; grep "^| qwen" $OUT/q27-min3.log | cut -d'|' -f9-12
timeout 100 $B/hindsight bench $C27 --batched 4:512 --batched 8:512 > $OUT/q27-def48.log 2>&1
echo "27B default 4/8 rc $?"; grep "^| qwen" $OUT/q27-def48.log | cut -d'|' -f9-12
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0 -p 0 -n 0 -r 1 --batched-gen 32"
for v in 0 1; do
  HS_CUDA_GEMMQ=$v timeout 100 $B/hindsight bench $C8 --batched 32:512 --batched 64:512 > $OUT/q8-$v.log 2>&1
  echo "8B GEMMQ=$v rc $?"; grep "^| llama" $OUT/q8-$v.log | cut -d'|' -f9-12
done
