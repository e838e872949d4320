#!/bin/bash
# Session 26: llama.cpp on its Q4_0 8B (run.sh quant, after s29c.sh) at 8 x 32K with q8_0 KV (its
# best long-context setting); as s28a.sh on the F16 weights.
W=/tmp/peer
date -u +"%F %T UTC"
timeout 300 $W/build/bin/llama-batched-bench -m $W/q4_0.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -c 266240 -b 2048 \
  -ub 512 -npp 32768 -ntg 32 -npl 8 2>&1 | tail -3 | tee $OUT/peer-q4-8x32k-q8.txt
date -u +"%F %T UTC"
