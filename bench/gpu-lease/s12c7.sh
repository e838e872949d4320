#!/bin/bash
# Session 12, call 7: one launcher core in pdl.cuh (launch_ex under launch_kernel / launch_chain):
# op tests and a tg128 / batched 8 check on the 8B shape.
mkdir -p /root/stage && tar xzf ${HS_BUNDLE:-.gpu/b6}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
timeout 200 $H/hs_unit_tests --gtest_filter='BackendOps.*:AttentionOps.*:BackendOpsFp8.*:BiasOps.*:Gemm16Mma.*:GemvWarp.*:QuantWarp*:QuantGemv.*:QuantLayout.*:RmsNormKernel.*:DecodeAttention.*:FlashPrefill.*' > $OUT/ops.txt 2>&1; echo "ops rc $?"
grep -E "FAILED|PASSED|tests ran" $OUT/ops.txt | head -10
timeout 100 $H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 \
  -p 0 -n 128 -d 0 --batched 8:512 -r 2 --json $OUT/b.json > /dev/null 2>&1; echo "bench rc $?"
python3 -c "
import json
d=json.load(open('$OUT/b.json'))
print('  '.join('%s %.2f'%(x['test'],x['tokens_per_second']) for x in d['results']))"
