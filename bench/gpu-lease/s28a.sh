#!/bin/bash
# Issue 14's table, second call (after s23f.sh, which runs hindsight's rows and llama.cpp at
# 1 x 256K with q8_0 KV; s26a.sh built llama.cpp and its F16 8B weights): llama.cpp at 8 x 32K
# with q8_0 KV (its best long-context setting), the same machine minutes later.
W=/tmp/peer
date -u +"%F %T UTC"
timeout 300 $W/build/bin/llama-batched-bench -m $W/f16.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -c 266240 -b 2048 \
  -ub 512 -npp 32768 -ntg 32 -npl 8 2>&1 | tail -3 | tee $OUT/peer-8x32k-q8.txt
date -u +"%F %T UTC"
