#!/bin/bash
# Session 12, call 4: RoPE cos/sin once per block in the fused RoPE + KV write, and glu_matmul (the
# down projection's GEMV making the gated product while staging x, HS_CUDA_GLU_GEMV): op tests,
# then tg128 / batched 8 on the 8B shape with each off and on, and Q4_0 tg128.
mkdir -p /root/stage && tar xzf ${HS_BUNDLE:-.gpu/b3}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
timeout 240 $H/hs_unit_tests --gtest_filter='BackendOps.*:AttentionOps.*:BackendOpsFp8.*:BiasOps.*:Gemm16Mma.*:GemvWarp.*:QuantWarp*:QuantGemv.*:QuantLayout.*:RmsNormKernel.*:DecodeAttention.*:FlashPrefill.*' > $OUT/ops.txt 2>&1; echo "ops rc $?"
grep -E "FAILED|PASSED|tests ran" $OUT/ops.txt | head -10; grep -E "FAIL" $OUT/ops.txt | head -10
B="$H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json"
tab() { python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
print('  '+'  '.join('%s %.2f (%.1f %%)'%(x['test'],x['tokens_per_second'],100*x['roofline']['fraction']) for x in d['results']))" $1; }
for cfg in 0:1 1:1 0:1 1:1 1:0; do
  g=${cfg%:*}; r=${cfg#*:}
  HS_CUDA_GLU_GEMV=$g HS_CUDA_ROPE_KV=$r timeout 100 $B --dummy-dtype bf16 -p 0 -n 128 -d 0 --batched 8:512 -r 3 \
    --json $OUT/b_g${g}_r$r.json > /dev/null 2>&1
  echo "bf16 glu_gemv=$g rope_kv=$r rc $?"; tab $OUT/b_g${g}_r$r.json
done
for e in 0 1 0; do
  HS_CUDA_EARLYQ=$e timeout 100 $B --dummy-dtype q4_0 -p 0 -n 128 -d 0 -r 3 --json $OUT/q_e$e.json > /dev/null 2>&1
  echo "q4_0 earlyq=$e rc $?"; tab $OUT/q_e$e.json
done
date +%T
