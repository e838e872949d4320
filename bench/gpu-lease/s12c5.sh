#!/bin/bash
# Session 12, call 5: the final binary (glu_matmul removed): op tests; then the shortest attention
# run (HS_CUDA_ATTN_MIN_SPLIT: 64 = default, 256, 512 keys) on tg128 / batched 8 / batched 64 /
# tg @ 32K, bf16 and Q4_0.
mkdir -p /root/stage && tar xzf ${HS_BUNDLE:-.gpu/b4}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
timeout 240 $H/hs_unit_tests --gtest_filter='BackendOps.*:AttentionOps.*:BackendOpsFp8.*:BiasOps.*:Gemm16Mma.*:GemvWarp.*:QuantWarp*:QuantGemv.*:QuantLayout.*:RmsNormKernel.*:DecodeAttention.*:FlashPrefill.*' > $OUT/ops.txt 2>&1; echo "ops rc $?"
grep -E "FAILED|PASSED|tests ran" $OUT/ops.txt | head -10; grep -E "FAIL" $OUT/ops.txt | head -10
B="$H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json"
tab() { python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
print('  '+'  '.join('%s %.2f (%.1f %%)'%(x['test'],x['tokens_per_second'],100*x['roofline']['fraction']) for x in d['results']))" $1; }
for m in 64 256 512 64 256; do
  HS_CUDA_ATTN_MIN_SPLIT=$m timeout 100 $B --dummy-dtype bf16 -p 0 -n 128 -d 0 --batched 8:512 --batched 64:512 -r 2 \
    --json $OUT/b_m$m.json > /dev/null 2>&1
  echo "bf16 min_split=$m rc $?"; tab $OUT/b_m$m.json
  HS_CUDA_ATTN_MIN_SPLIT=$m timeout 100 $B --dummy-dtype q4_0 -p 0 -n 128 -d 0 -r 2 --json $OUT/q_m$m.json > /dev/null 2>&1
  echo "q4_0 min_split=$m rc $?"; tab $OUT/q_m$m.json
done
date +%T
