#!/bin/bash
# Session 24, second lease (carry .gpu/bundle): the quantized GEMM with 4 x stages and 3-deep
# weights, from 5 rows: the op suites (all of BackendOps, the hybrid ops, the GEMM's kernel
# tests), its weight-read rate with forced cluster splits, then issue 15's 27B rows as s24q.sh ran
# them (llama.cpp's figures: that lease, same H100 kind), its 8 x 32K with sparse attention, and
# the 8B shape's Q4_0 rows (issue 13).
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 200 $B/hs_unit_tests --gtest_filter='QuantGemv.*:BackendOps*:HybridOps*:*Golden*:QuantWarpGemv*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |^gemm " $OUT/tests.log | head -30
grep -A6 "Failure" $OUT/tests.log | head -40
HS_GEMV_BENCH=1 timeout 90 $B/hs_unit_tests --gtest_filter='QuantGemv.GemmBandwidth' > $OUT/bw.log 2>&1; echo "bw rc $?"
grep -E "^Q4_0|^w " $OUT/bw.log | head -70
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
date -u +"%F %T UTC"
timeout 200 $B/hindsight bench $C27 -p 512 -n 128 -d 0 -r 2 --batched 1:512 --batched 8:512 --batched 32:512 \
  --batched 8:32768 --batched-gen 128 --json $OUT/h27.json > $OUT/h27.log 2>&1; echo "27B rc $?"
grep "^| qwen\|peaks" $OUT/h27.log | cut -d'|' -f9-14
timeout 120 $B/hindsight bench $C27 -p 0 -n 0 -r 1 --batched 8:32768 --batched-gen 64 --sparse sketch --sketch random \
  --json $OUT/h27s.json > $OUT/h27s.log 2>&1; echo "27B sparse rc $?"
grep "^| qwen" $OUT/h27s.log | cut -d'|' -f9-16
date -u +"%F %T UTC"
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0"
timeout 120 $B/hindsight bench $C8 -p 0 -n 128 -d 0 -r 2 --batched 8:512 --batched 32:512 --batched 64:512 \
  --batched-gen 128 --json $OUT/h8.json > $OUT/h8.log 2>&1; echo "8B rc $?"
grep "^| llama" $OUT/h8.log | cut -d'|' -f9-12
