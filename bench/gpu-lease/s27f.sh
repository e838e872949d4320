#!/bin/bash
# Session 25, after s27e.sh (its binaries in /root/st): on the Qwen3.5-27B shape at batch 1 (Q4_0),
# the fused qk_norm_rope_kv_write against the five ops (HS_CUDA_ROPE_KV=0), and the norm / GLU
# writing the quantized GEMV's x records (HS_CUDA_EARLYQ=1), alternating, each its own process.
# The norm / GLU writing the quantized GEMV's x records (HS_CUDA_EARLYQ=1): measured slower on the
# 8B shape (session 12), never on the Qwen3.5-27B shape, whose batch 1 runs ~13 launches a layer.
export LD_LIBRARY_PATH=/root/st/hs/lib:/usr/local/cuda/lib64
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0 -p 0 -n 128 -r 2"
for v in 0 1 0 1; do
  HS_CUDA_EARLYQ=$v timeout 60 /root/st/hs/hindsight bench $C27 > $OUT/eq$v.log 2>&1
  echo "27B EARLYQ=$v rc $?"; grep "^| qwen" $OUT/eq$v.log | cut -d'|' -f9-12
done
for v in 0 1 0 1; do
  HS_CUDA_ROPE_KV=$v timeout 60 /root/st/hs/hindsight bench $C27 > $OUT/rk$v.log 2>&1
  echo "27B ROPE_KV=$v rc $?"; grep "^| qwen" $OUT/rk$v.log | cut -d'|' -f9-12
done
