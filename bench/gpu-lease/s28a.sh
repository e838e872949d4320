#!/bin/bash
# Issue 14's table in one lease (after s26a.sh built llama.cpp and its F16 8B weights): hindsight's
# rows as s23f.sh (1 x 128K / 256K dense, sparse with the rerank, sparse without; 8 x 256K on the
# int4 host tier), then llama.cpp with q8_0 KV (its best long-context setting) at 1 x 256K and
# 8 x 32K, all on the same machine minutes apart.
bash bench/gpu-lease/s23f.sh
W=/tmp/peer
timeout 240 $W/build/bin/llama-batched-bench -m $W/f16.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -c 266240 -b 2048 \
  -ub 512 -npp 32768 -ntg 32 -npl 8 2>&1 | tail -3 | tee $OUT/peer-8x32k-q8.txt
date -u +"%F %T UTC"
