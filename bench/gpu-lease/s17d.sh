#!/bin/bash
# Session 17, call 4: the tensor-core quantized GEMV (3-8 tokens) ran at ~0.7 TB/s at n = 8 (s17c
# profile); sweep its CTA shape (HS_CUDA_GEMV_RW row-warps x HS_CUDA_GEMV_CK cluster slices)
# on batched 8 decode of the 27B and 8B shapes (Q4_0).
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0"
for c in C27 C8; do
  for p in 0,0 1,1 2,1 4,1 8,1 1,2 2,2 4,2 8,2 4,4 8,4; do
    rw=${p%,*}; ck=${p#*,}
    HS_CUDA_GEMV_RW=$rw HS_CUDA_GEMV_CK=$ck timeout 60 $B/hindsight bench ${!c} -p 0 -n 0 -d 0 -r 1 --no-peaks \
      --batched 8:64 --batched-gen 32 > $OUT/g_${c}_${rw}_${ck}.log 2>&1
    echo "$c rw $rw ck $ck: $(grep 'batched' $OUT/g_${c}_${rw}_${ck}.log | grep '^|' | cut -d'|' -f11)"
  done
done
