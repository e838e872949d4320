#!/bin/bash
# Session 12, call 6: the final split rule (runs of >= 256 keys for ranges <= 256 or >= 64 (token,
# kv head) rows, else >= 64): op tests, then the rows it touches against the old rule (forced 64).
mkdir -p /root/stage && tar xzf ${HS_BUNDLE:-.gpu/b5}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
timeout 240 $H/hs_unit_tests --gtest_filter='BackendOps.*:AttentionOps.*:BackendOpsFp8.*:DecodeAttention.*:FlashPrefill.*:QuantWarp*:GemvWarp.*' > $OUT/ops.txt 2>&1; echo "ops rc $?"
grep -E "FAILED|PASSED|tests ran" $OUT/ops.txt | head -10; grep -E "FAIL" $OUT/ops.txt | head -10
B="$H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json"
tab() { python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
print('  '+'  '.join('%s %.2f'%(x['test'],x['tokens_per_second']) for x in d['results']))" $1; }
for m in 0 64 0; do
  HS_CUDA_ATTN_MIN_SPLIT=$m timeout 150 $B --dummy-dtype bf16 -p 0 -n 128 -d 0 2048 --batched 8:512 --batched 64:512 --batched 8:32768 -r 2 \
    --json $OUT/b_m$m.json > /dev/null 2>&1
  echo "bf16 forced_min=$m rc $?"; tab $OUT/b_m$m.json
  HS_CUDA_ATTN_MIN_SPLIT=$m timeout 100 $B --dummy-dtype q4_0 -p 0 -n 128 -d 0 -r 2 --json $OUT/q_m$m.json > /dev/null 2>&1
  echo "q4_0 forced_min=$m rc $?"; tab $OUT/q_m$m.json
done
date -u +%FT%T
