#!/bin/bash
# Session 13, call 2 (a new lease): the faster selection kernels (projection once per row,
# 32-chunk score blocks, warp-parallel radix bin search, sketch encode over 8 warps): sparse op
# tests, then dense vs sparse on the 8B shape at 32K / 128K / 256K, then a per-op profile at 32K.
mkdir -p /root/stage && tar xzf ${HS_BUNDLE:-.gpu/b9}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
timeout 200 $H/hs_unit_tests --gtest_filter='SparseAttentionOps.*:AttentionOps.*' > $OUT/sparse_ops.txt 2>&1; echo "ops rc $?"
grep -E "^\[  (PASSED|FAILED)|sparse select|Failure" $OUT/sparse_ops.txt | head -20
bash bench/gpu-lease/s13bench.sh
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16"
HS_CUDA_PROFILE=1 timeout 200 $H/hindsight bench $C -p 0 -n 16 -d 32768 --sparse sketch --sketch random -r 1 > $OUT/prof.log 2>&1
grep -E "^\| (attention|rope|op )" $OUT/prof.log
