#!/bin/bash
# Session 28, a fresh machine with .gpu/bundle carried: L2 prefetch of a quantized matmul's
# weights while it waits for x (HS_CUDA_QW_PREFETCH / HS_CUDA_GEMMQ_PREFETCH = MiB a launch).
# Suites with both on, then A/Bs on issue 15's rows (27B shape, Q4_0 dummy weights), alternating.
mkdir -p /root/st && python3 -m tarfile -e .gpu/bundle/bins.txz /root/st 2>/dev/null
B=/root/st/hs
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
date -u +"%F %T UTC"
HS_CUDA_QW_PREFETCH=16 HS_CUDA_GEMMQ_PREFETCH=16 HS_CUDA_QW_CTAS=4 timeout 200 $B/hs_unit_tests \
  --gtest_filter='QuantWarpGemv.*:QuantGemv.*:BackendOps.*Matmul*:BackendOps.Early*:HybridOps.*' > $OUT/tests.log 2>&1
echo "suites rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  |Failure" $OUT/tests.log | head -12
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
# prefetch MiB : CTAs an SM of the batch-1 GEMV (4: the pipelined loop at 32 warps)
for mc in 0:3 24:3 0:4 0:3 24:3 0:4; do
  HS_CUDA_QW_PREFETCH=${mc%:*} HS_CUDA_QW_CTAS=${mc#*:} timeout 100 $B/hindsight bench $C27 -p 16 -n 128 -d 0 -r 2 \
    > $OUT/tg-${mc/:/-}.log 2>&1
  echo "27B tg128 prefetch:ctas=$mc rc $?"; grep "^| qwen" $OUT/tg-${mc/:/-}.log | grep tg128 | cut -d"|" -f9-14
done
for m in 0 32; do
  HS_CUDA_GEMMQ_PREFETCH=$m timeout 100 $B/hindsight bench $C27 -p 0 -n 0 -r 1 --batched 8:32768 --batched-gen 32 \
    --kv-cache-dtype int8 > $OUT/b8-$m.log 2>&1
  echo "27B 8x32K int8 prefetch=$m MiB rc $?"; grep "^| qwen" $OUT/b8-$m.log | cut -d"|" -f9-14
done
date -u +"%F %T UTC"
