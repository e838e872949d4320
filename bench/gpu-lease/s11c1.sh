#!/bin/bash
# Session 11, call 1: the tensor-core GEMM for 3..8 rows (gemm16_mma): op tests, its rate next to
# cuBLAS, and the 8B-shape bench with it on / off / on (HS_CUDA_MMA16). Stages SmolLM2 part 1.
mkdir -p /root/stage/m && tar xzf ${HS_BUNDLE:-.gpu/b19}/bins.tgz -C /root/stage && mv .gpu/sa/smol.00 /root/stage/m/
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 240 $H/hs_unit_tests --gtest_filter='Gemm16Mma.*:BackendOps.*:GemvWarp.MultiMatchesReference' > $OUT/ops.txt 2>&1; echo "ops rc $?"
grep -E "FAILED|PASSED|Failure" $OUT/ops.txt | head -20
HS_GEMV_BENCH=1 timeout 60 $H/hs_unit_tests --gtest_filter='Gemm16Mma.Bandwidth' > $OUT/bw.txt 2>&1; echo "bw rc $?"
grep -A12 "weights (bf16)" $OUT/bw.txt; grep "D2D" $OUT/bw.txt
for m in 1 0 1; do
  HS_CUDA_MMA16=$m timeout 150 $H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json \
    --dummy-dtype bf16 -p 0 -n 128 -d 0 --batched 8:512 --batched 8:32768 -r 2 --json $OUT/bench_$m.json > $OUT/bench_$m.txt 2>&1
  echo "bench mma16=$m rc $?"; grep -E "^\| .*(tg|batched)" $OUT/bench_$m.txt | cut -c1-200
done
date +%T
