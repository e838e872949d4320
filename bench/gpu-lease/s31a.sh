#!/bin/bash
# Next lease, after s30a.sh (binaries in /root/st): the tensor-core attention's compact tiling
# (HS_CUDA_ATTN_MMA_COMPACT=1: 2 ring stages, unpadded rows; 8-bit pages at head_dim 256 fit 3
# blocks an SM instead of 2). Its suites first (the kernel forced on everywhere), then the A/B on
# issue 15's row (27B shape, Q4_0, 8 x 32K dense, int8 and fp8 KV), alternating twice.
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
date -u +"%F %T UTC"
HS_CUDA_ATTN_MMA=1 HS_CUDA_ATTN_MMA_COMPACT=1 timeout 240 $B/hs_unit_tests \
  --gtest_filter='AttentionOps.TensorCore*:AttentionOps.Fp8*:AttentionOps.Int8*:DecodeAttention.MatchesHostReference:SparseAttentionOps*:HostTierOps*' \
  > $OUT/compact-tests.log 2>&1; echo "compact tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |Failure" $OUT/compact-tests.log | head -12
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0 -p 0 -n 0 -r 1 --batched 8:32768 --batched-gen 32"
for kvt in int8 fp8; do
  for c in 0 1 0 1; do
    HS_CUDA_ATTN_MMA_COMPACT=$c timeout 100 $B/hindsight bench $C27 --kv-cache-dtype $kvt > $OUT/c-$kvt-$c.log 2>&1
    echo "27B 8x32K $kvt compact=$c rc $?"; grep "^| qwen" $OUT/c-$kvt-$c.log | cut -d'|' -f9-12
  done
done
date -u +"%F %T UTC"
