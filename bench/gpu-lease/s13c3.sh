#!/bin/bash
# Session 13, call 3: where the sparse step's time goes: the per-kernel profile (eager) at 32K and
# 256K, sparse only; and whether nsys is on the machine.
mkdir -p /root/stage && tar xzf ${HS_BUNDLE:-.gpu/b13}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
which nsys ncu 2>&1 | head -2; ls /usr/local/cuda/bin | grep -iE "nsys|ncu|nvprof" | head
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16"
for d in 262144; do
  HS_CUDA_PROFILE=1 timeout 200 $H/hindsight bench $C -p 0 -n 16 -d $d --sparse sketch --sketch random -r 1 > $OUT/prof$d.log 2>&1
  echo "depth $d"; grep -E "^\| (attention|rope|op |llama)" $OUT/prof$d.log | cut -c1-200
done
timeout 200 $H/hs_unit_tests --gtest_filter='SparseAttentionOps.*' > $OUT/sparse_ops.txt 2>&1; echo "sparse ops rc $?"
grep -E "^\[  (PASSED|FAILED)|sparse select|Failure" $OUT/sparse_ops.txt | head -20
bash bench/gpu-lease/s13bench.sh
