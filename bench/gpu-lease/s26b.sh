#!/bin/bash
# Next lease, after s26a.sh: issue 14's long prefill on the host tier with the prefill staging
# (kv_stage.h), against HS_CUDA_PREFILL_STAGE=0 (the exact kernel over the mapped pages, as
# before) at a length the old path can finish; the 8B shape, int4 host KV.
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs/hindsight
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -n 0 -r 1 --kv-tier host --kv-cache-dtype int4 --device-kv-budget 4294967296"
# (the old path reads every earlier key over PCIe per token: 2048 tokens is ~70 GB of int4 reads)
for st in 0 default; do
  if [ $st = 0 ]; then E="HS_CUDA_PREFILL_STAGE=0"; P="2048"; else E=""; P="2048 8192"; fi
  env $E timeout 150 $B bench $C -p $P > $OUT/pp-$st.log 2>&1; echo "stage $st rc $?"
  grep "^| llama" $OUT/pp-$st.log | cut -d'|' -f9-12
done
# long prompts prefilled in 8K-token chunks (the --batched test's real prefill, then 8 decode steps)
timeout 300 $B bench $C -p 0 --batched 1:32768 --batched 1:131072 --ubatch 8192 --batched-gen 8 \
  --batched-synthetic-above 1000000 > $OUT/pp-long.log 2>&1; echo "long rc $?"
grep "^| llama" $OUT/pp-long.log | cut -d'|' -f9-12
# device tier, int4 pages: staged flash against the exact kernel
for st in 0 default; do
  if [ $st = 0 ]; then E="HS_CUDA_PREFILL_STAGE=0"; else E=""; fi
  env $E timeout 100 $B bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 \
    -n 0 -r 1 --kv-cache-dtype int4 -p 8192 > $OUT/ppd-$st.log 2>&1; echo "device int4 stage $st rc $?"
  grep "^| llama" $OUT/ppd-$st.log | cut -d'|' -f9-12
done
