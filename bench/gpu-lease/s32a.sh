#!/bin/bash
# Session 28, after s30a.sh (binaries in /root/st): the software-pipelined batch-1 quantized GEMV
# (HS_CUDA_QW_PIPE=1). Its suites (every plan, the pipelined ones included, bitwise equal within
# a rows-per-warp), the bandwidth table (8B and 27B shapes, plain and pipelined side by side),
# then the A/B on issue 15's batch-1 row (27B shape, Q4_0 dummy weights), alternating.
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
date -u +"%F %T UTC"
timeout 200 $B/hs_unit_tests --gtest_filter='QuantWarpGemv.*:QuantGemv.*' > $OUT/qw-tests.log 2>&1
echo "gemv tests rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  |Failure" $OUT/qw-tests.log | head -12
HS_GEMV_BENCH=1 timeout 150 $B/hs_unit_tests --gtest_filter='QuantWarpGemv.Bandwidth' > $OUT/qw-bw.log 2>&1
echo "bandwidth rc $?"; grep -E "^cudaMemcpy|^Q4_0|^Q8_0" $OUT/qw-bw.log | grep -E "cudaMemcpy| 1  " | cut -c1-110
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0 -p 16 -n 128 -d 0 -r 2"
# pipe / CTAs an SM: the plain loop at 3 (the default), pipelined at 3, pipelined at 2 (16 warps,
# 8 loads a lane in flight).
for pc in 0:3 1:3 1:2 0:3 1:3 1:2; do
  HS_CUDA_QW_PIPE=${pc%:*} HS_CUDA_QW_CTAS=${pc#*:} timeout 100 $B/hindsight bench $C27 > $OUT/tg-${pc/:/-}.log 2>&1
  echo "27B tg128 pipe:ctas=$pc rc $?"; grep "^| qwen" $OUT/tg-${pc/:/-}.log | cut -d"|" -f9-14
done
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0 -p 16 -n 128 -d 0 -r 2"
for c in 0 1 0 1; do
  HS_CUDA_QW_PIPE=$c timeout 60 $B/hindsight bench $C8 > $OUT/tg8-$c.log 2>&1
  echo "8B tg128 pipe=$c rc $?"; grep "^| llama" $OUT/tg8-$c.log | cut -d"|" -f9-14
done
date -u +"%F %T UTC"
