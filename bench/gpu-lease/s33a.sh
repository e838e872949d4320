#!/bin/bash
# Session 28, a fresh machine with .gpu/bundle carried: the batch-1 GEMV's early trigger
# (HS_CUDA_QW_TRIGGER=1), the wide ops writing the GEMV's records (HS_CUDA_EARLYQ=wide) and the 8-row GEMM's rows-a-CTA by wave fill (HS_CUDA_GEMMQ_WAVES=1).
# Suites first (the GEMV / GEMM / backend-op / hybrid suites with both knobs on), then A/Bs on
# issue 15's rows (27B shape, Q4_0 dummy weights), alternating; the pipelined GEMV is on in all.
mkdir -p /root/st && python3 -m tarfile -e .gpu/bundle/bins.txz /root/st 2>/dev/null
B=/root/st/hs
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
export HS_CUDA_QW_PIPE=1
date -u +"%F %T UTC"
HS_CUDA_QW_TRIGGER=1 HS_CUDA_GEMMQ_WAVES=1 HS_CUDA_EARLYQ=wide timeout 240 $B/hs_unit_tests \
  --gtest_filter='QuantWarpGemv.*:QuantGemv.*:BackendOps.*:HybridOps.*' > $OUT/tests.log 2>&1
echo "suites rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  |Failure" $OUT/tests.log | head -12
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
# trigger / early quantization (0: none; 1: norms, GLU, gated norm writing the GEMV's x records:
# session 26 found it slower with the norms; wide: the GLU and the gated norm only)
for te in 0:0 1:0 0:wide 1:wide 0:1 0:0 1:0 0:wide 1:wide; do
  HS_CUDA_QW_TRIGGER=${te%:*} HS_CUDA_EARLYQ=${te#*:} timeout 100 $B/hindsight bench $C27 -p 16 -n 128 -d 0 -r 2 \
    > $OUT/tg-${te/:/-}.log 2>&1
  echo "27B tg128 trigger:earlyq=$te rc $?"; grep "^| qwen" $OUT/tg-${te/:/-}.log | grep tg128 | cut -d"|" -f9-14
done
for c in 0 1 0 1; do
  HS_CUDA_GEMMQ_WAVES=$c timeout 100 $B/hindsight bench $C27 -p 0 -n 0 -r 1 --batched 8:32768 --batched-gen 32 \
    --kv-cache-dtype int8 > $OUT/b8-$c.log 2>&1
  echo "27B 8x32K int8 waves=$c rc $?"; grep "^| qwen" $OUT/b8-$c.log | cut -d"|" -f9-14
done
date -u +"%F %T UTC"
