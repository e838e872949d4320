#!/bin/bash
# Session 12, call 3: SmolLM2 part 3, then its golden / batched = alone / graph tests on CUDA with
# this session's defaults and with the fused RoPE + KV write and the PDL chain off.
cat /root/stage/m/smol.00 /root/stage/m/smol.01 .gpu/sc/smol.02 > /root/stage/m/smollm2-135m-instruct-q4_1.gguf && rm /root/stage/m/smol.0*
sha256sum /root/stage/m/smollm2-135m-instruct-q4_1.gguf | cut -c1-16
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
U=/root/stage/hs/hs_unit_tests
for cfg in 1:1 0:0; do
  a=${cfg%:*}; r=${cfg#*:}
  HS_CUDA_PDL_ALL=$a HS_CUDA_ROPE_KV=$r HS_MODELS_DIR=/root/stage/m timeout 200 $U --gtest_filter='*Golden*smollm2_cuda*:*GraphTest*smollm2*' > $OUT/golden_a${a}_r$r.log 2>&1; echo "golden pdl_all=$a rope_kv=$r rc $?"
  grep -E "^\[golden\]|FAIL|PASSED|Failure" $OUT/golden_a${a}_r$r.log | grep -v "greedy identical" | head -12
done
date +%T
