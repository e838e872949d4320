#!/bin/bash
# Next lease, first call (carry .gpu/bundle .gpu/peer, the peer packed with its qwen35 files):
# unpack; llama.cpp's build in the background (s22a.sh, which also runs the sparse and host-tier
# suites: the new HostTierOps.PromptRunsReadAStagedCopyBitForBit and
# SparseAttentionOps.MixedStepSelectsOnlyItsDecodeRows); then the suites that cover
# session 24's unverified changes: the hybrid kernels as programmatic dependents (HybridOps, the
# tiny qwen35 / qwen3next golden models on CUDA, graph replay == eager), the quantized GEMM's
# multi-weight launch (QuantGemv, BackendOps), the prefill staging (AttentionOps: fp8 / int8 /
# int4 prompts now staged); then the eager profile of the 27B shape's batch-8 decode.
bash bench/gpu-lease/s22a.sh
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 240 $B/hs_unit_tests --gtest_filter='HybridOps*:*HybridGolden*:*Golden*:QuantGemv.*:BackendOps*:QuantWarpGemv*:AttentionOps*' \
  > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |SKIPPED" $OUT/tests.log | head -30
grep -A6 "Failure" $OUT/tests.log | head -30
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
HS_CUDA_PROFILE=1 timeout 120 $B/hindsight bench $C27 -p 0 -n 0 -r 1 --batched 8:512 --batched-gen 16 > $OUT/prof8.log 2>&1
echo "profile rc $?"; grep -A36 "^cuda op profile" $OUT/prof8.log | cut -c1-150 | head -38
HS_GEMV_BENCH=1 timeout 90 $B/hs_unit_tests --gtest_filter='QuantGemv.GemmBandwidth' > $OUT/bw.log 2>&1; echo "bw rc $?"
grep -E "^Q4_0" $OUT/bw.log | grep -E " (5|8) " | head -40
for v in 0 1; do  # the quantized GEMM's barrier-free variant for 5-8 rows (HS_CUDA_GEMMQ_WARP=1) against the staged one
  HS_CUDA_GEMMQ_WARP=$v timeout 100 $B/hindsight bench $C27 -p 0 -n 0 -r 2 --batched 8:512 --batched-gen 64 > $OUT/gw$v.log 2>&1
  echo "GEMMQ_WARP=$v rc $?"; grep "^| qwen" $OUT/gw$v.log | cut -d'|' -f9-12
done
for v in 1 0; do  # the hybrid kernels' launches chained (default) or plain (HS_CUDA_PDL_ALL=0 also unchains the rest)
  HS_CUDA_PDL_ALL=$v timeout 100 $B/hindsight bench $C27 -p 0 -n 128 -r 2 --batched 8:512 --batched-gen 64 > $OUT/pdl$v.log 2>&1
  echo "PDL_ALL=$v rc $?"; grep "^| qwen" $OUT/pdl$v.log | cut -d'|' -f9-12
done
