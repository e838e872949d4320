#!/bin/bash
# Session 11, call 2: SmolLM2 part 2, then its golden / batched = alone / graph tests on CUDA.
cat /root/stage/m/smol.00 .gpu/sb/smol.01 > /root/stage/m/smollm2-135m-instruct-q4_1.gguf && rm /root/stage/m/smol.00
sha256sum /root/stage/m/smollm2-135m-instruct-q4_1.gguf | cut -c1-16
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
U=/root/stage/hs/hs_unit_tests
HS_MODELS_DIR=/root/stage/m timeout 200 $U --gtest_filter='*Golden*smollm2_cuda*:*GraphTest*smollm2*' > $OUT/golden.log 2>&1; echo "golden rc $?"
grep -E "^\[golden\]|FAIL|PASSED|Failure|OK \]" $OUT/golden.log | head -30
date +%T
