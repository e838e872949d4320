#!/bin/bash
# Session 27: whether the tensor-core decode attention can be the default: the 8B shape's rows
# with f16 pages, HS_CUDA_ATTN_MMA 0 / 1 alternating (Q4_0 dummy weights): batch 1 at 4K and 32K
# keys, 8 x 32K dense, and the sparse step at 1 x 128K (its rows attend the selected pages through
# the same kernel).
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0 -p 0 -r 1"
run() { local name=$1; shift; for m in 0 1; do
  HS_CUDA_ATTN_MMA=$m timeout 70 $B/hindsight bench $C "$@" > $OUT/$name-$m.log 2>&1
  echo "$name mma=$m rc $?"; grep "^| llama" $OUT/$name-$m.log | cut -d'|' -f9-12; done; }
date -u +"%F %T UTC"
run tg -n 64 -d 4096 32768
run b8 -n 0 --batched 8:32768 --batched-gen 32
run sp -n 32 -d 131072 --sparse sketch --sketch random
date -u +"%F %T UTC"
