#!/bin/bash
# Session 11, call 4: every small kernel now lets its PDL successor start early; the GEMVs launched
# as programmatic dependents (HS_CUDA_PDL=1: gemv_warp, gemm16_mma; Q4_0 warp GEMV always) load
# weights before they wait. Op tests, then the 8B bench over (HS_CUDA_PDL, HS_CUDA_MMA16).
mkdir -p /root/stage/m && tar xzf ${HS_BUNDLE:-.gpu/b21}/bins.tgz -C /root/stage && mv .gpu/sa/smol.00 /root/stage/m/
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
timeout 200 $H/hs_unit_tests --gtest_filter='Gemm16Mma.*:BackendOps.*:AttentionOps.*:GemvWarp.*:QuantWarp*:RmsNormKernel.*' > $OUT/ops.txt 2>&1; echo "ops rc $?"
grep -E "FAILED|PASSED|Failure" $OUT/ops.txt | head -20
B="$H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json"
for cfg in 0:0 1:0 1:1 1:2 0:1 1:1; do
  p=${cfg%:*}; m=${cfg#*:}
  HS_CUDA_PDL=$p HS_CUDA_MMA16=$m timeout 100 $B --dummy-dtype bf16 -p 0 -n 128 -d 0 --batched 8:512 --batched 8:32768 -r 2 \
    --json $OUT/bf16_p${p}_m$m.json > $OUT/bf16_p${p}_m$m.txt 2>&1
  echo "bf16 pdl=$p mma16=$m rc $?"; grep -E "^\| .*(tg|batched)" $OUT/bf16_p${p}_m$m.txt | cut -c80-175
done
for p in 0 1; do
  HS_CUDA_PDL=$p timeout 100 $B --dummy-dtype q4_0 -p 0 -n 128 -d 0 -r 2 > $OUT/q40_p$p.txt 2>&1
  echo "q4_0 pdl=$p rc $?"; grep -E "^\| .*tg" $OUT/q40_p$p.txt | cut -c80-175
done
date +%T
