#!/bin/bash
# Session 23, first call of the second lease (carry .gpu/bundle .gpu/peer): as s22a.sh (unpack;
# llama.cpp's build / gen / quant in the background), then the quantized warp-GEMV suite at the
# seed that failed in the first lease (make_x read past its two token scales), and a fresh seed.
bash bench/gpu-lease/s22a.sh
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
for s in 5334893114480632864 ""; do
  HS_TEST_SEED=$s timeout 120 /root/stage/hs/hs_unit_tests --gtest_filter='QuantWarpGemv*' > $OUT/warp$s.log 2>&1
  echo "warp seed '${s}' rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/warp$s.log | head -8
done
