#!/bin/bash
# Session 24, third lease (carry .gpu/bundle): the quantized GEMM's planner with a per-CTA cost
# (fitted on s25b's forced splits): its weight-read rate, the 27B rows again (as s24q.sh), the 8B
# Q4_0 rows, and the eager profile of the 27B's batch-1 decode (the next target: 65 % of roofline).
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 60 $B/hs_unit_tests --gtest_filter='QuantGemv.Gemm*:BackendOps.Matmul*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/tests.log | head
HS_GEMV_BENCH=1 timeout 90 $B/hs_unit_tests --gtest_filter='QuantGemv.GemmBandwidth' > $OUT/bw.log 2>&1; echo "bw rc $?"
grep -E "^Q4_0" $OUT/bw.log | grep -v forced | head -42
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
date -u +"%F %T UTC"
timeout 200 $B/hindsight bench $C27 -p 512 -n 128 -d 0 -r 2 --batched 1:512 --batched 8:512 --batched 32:512 \
  --batched 8:32768 --batched-gen 128 --json $OUT/h27.json > $OUT/h27.log 2>&1; echo "27B rc $?"
grep "^| qwen" $OUT/h27.log | cut -d'|' -f9-14
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0"
timeout 120 $B/hindsight bench $C8 -p 0 -n 0 -r 2 --batched 8:512 --batched 32:512 --batched 64:512 \
  --batched-gen 128 --json $OUT/h8.json > $OUT/h8.log 2>&1; echo "8B rc $?"
grep "^| llama" $OUT/h8.log | cut -d'|' -f9-12
HS_CUDA_PROFILE=1 timeout 90 $B/hindsight bench $C27 -p 0 -n 16 -d 0 -r 1 > $OUT/prof1.log 2>&1; echo "profile rc $?"
grep -A40 "^cuda op profile" $OUT/prof1.log | cut -c1-150 | head -42
date -u +"%F %T UTC"
