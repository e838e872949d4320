#!/bin/bash
# Session 12, call 2: SmolLM2 part 2 of 3, and the 8B shape's 64-sequence and depth rows with this
# session's defaults (PDL on every decode kernel, fused RoPE + KV write).
mv .gpu/sb/smol.01 /root/stage/m/
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
B="$H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json"
for a in 1 0; do
  HS_CUDA_PDL_ALL=$a timeout 200 $B --dummy-dtype bf16 -p 512 -n 128 -d 32768 131072 --batched 32:512 --batched 64:512 -r 2 \
    --json $OUT/bf16big_a$a.json > $OUT/bf16big_a$a.txt 2>&1
  echo "bf16 pdl_all=$a rc $?"; grep -E "^\| .*(pp|tg|batched)" $OUT/bf16big_a$a.txt | cut -c120-175
done
date +%T
