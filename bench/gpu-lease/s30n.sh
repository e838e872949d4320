#!/bin/bash
# Session 27: the tensor-core decode attention's A/B (after s30v.sh's suites, or gpu-check, whose ops-mma step ran the attention suites
# with the tensor-core kernel on): the Qwen3.5-27B shape (Q4_0) at 8 x 32K dense, f16 and int8
# KV, HS_CUDA_ATTN_MMA 0 / 1 (issue 15's row), then the 8B (Q4_0) at 1 x 128K dense, int8 KV.
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
date -u +"%F %T UTC"
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0 -p 0 -n 0 -r 1 --batched 8:32768 --batched-gen 32"
for kvt in f16 int8; do
  for m in 0 1; do
    HS_CUDA_ATTN_MMA=$m timeout 100 $B/hindsight bench $C27 --kv-cache-dtype $kvt --json $OUT/h27-$kvt-$m.json > $OUT/h27-$kvt-$m.log 2>&1
    echo "27B 8x32K $kvt mma=$m rc $?"; grep "^| qwen" $OUT/h27-$kvt-$m.log | cut -d'|' -f9-14
  done
done
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0 -p 0 -r 1 -n 32 -d 131072 --kv-cache-dtype int8"
for m in 0 1; do
  HS_CUDA_ATTN_MMA=$m timeout 80 $B/hindsight bench $C8 > $OUT/h8-int8-$m.log 2>&1
  echo "8B 1x128K int8 mma=$m rc $?"; grep "^| llama" $OUT/h8-int8-$m.log | cut -d'|' -f9-14
done
date -u +"%F %T UTC"
