#!/bin/bash
# Session 11, call 7: the quantize kernel of the batch-1 quantized GEMV as a programmatic
# dependent too (HS_CUDA_PDL_X): op tests, then tg128 Q4_0 on the 8B shape, 0 / 1 / 0 / 1.
mkdir -p /root/stage && tar xzf ${HS_BUNDLE:-.gpu/b22}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
for x in 0 1; do HS_CUDA_PDL_X=$x timeout 120 $H/hs_unit_tests --gtest_filter='QuantWarp*:QuantGemv*:BackendOps.Matmul*' > $OUT/ops_x$x.txt 2>&1; echo "ops pdl_x=$x rc $?"; grep -E "FAILED|PASSED" $OUT/ops_x$x.txt | head -5; done
B="$H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json"
for x in 0 1 0 1; do
  HS_CUDA_PDL_X=$x timeout 100 $B --dummy-dtype q4_0 -p 0 -n 128 -d 0 -r 2 > $OUT/q40_x$x.txt 2>&1
  echo "q4_0 pdl_x=$x rc $? $(grep -E '^\| .*tg128' $OUT/q40_x$x.txt | cut -c95-140)"
done
date +%T
