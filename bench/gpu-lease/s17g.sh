#!/bin/bash
# Session 17, call 7: the 3-8 token warp GEMV's tests after the fixes of s17f's failures (Q8_0 at
# 3 tokens planned R = 3; tolerances of the int16-x path at 3-8 rows; the refusal cases).
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 120 $B/hs_unit_tests --gtest_filter='QuantWarpGemv*:BackendOps.Matmul*:*HybridGolden*cuda*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/ops.log | head -20
