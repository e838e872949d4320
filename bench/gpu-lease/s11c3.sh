#!/bin/bash
# Session 11, call 3: gemm16_mma load schemes: op tests, the sweep next to cuBLAS, and the 8B bf16
# bench with HS_CUDA_MMA16 = 0 (cuBLAS) / 1 (the tile rule) / 2 (always) / 1 again.
mkdir -p /root/stage && tar xzf ${HS_BUNDLE:-.gpu/b20}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
timeout 200 $H/hs_unit_tests --gtest_filter='Gemm16Mma.*:BackendOps.Matmul*' > $OUT/ops.txt 2>&1; echo "ops rc $?"
grep -E "FAILED|PASSED|Failure" $OUT/ops.txt | head -20
HS_GEMV_BENCH=1 timeout 100 $H/hs_unit_tests --gtest_filter='Gemm16Mma.Bandwidth' > $OUT/bw.txt 2>&1; echo "bw rc $?"
grep -E "^[a-z/].*(best|GB/s$)" $OUT/bw.txt
for m in 0 1 2 1; do
  HS_CUDA_MMA16=$m timeout 120 $H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json \
    --dummy-dtype bf16 -p 0 -n 16 -d 0 --batched 4:512 --batched 8:512 --batched 8:32768 -r 2 --json $OUT/bench_$m.json > $OUT/bench_$m.txt 2>&1
  echo "bench mma16=$m rc $?"; grep -E "^\| .*batched" $OUT/bench_$m.txt | cut -c80-200
done
date +%T
