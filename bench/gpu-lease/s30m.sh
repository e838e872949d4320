#!/bin/bash
# Session 27: the tensor-core decode attention (attention_mma.cu, HS_CUDA_ATTN_MMA=1), binaries in
# /root/st (s30a.sh). First its correctness on the GPU: the attention suites with it on (every
# f16 / int8 / fp8 decode case takes it; DecodeAttention's 1e-4 bounds included), then the A/B
# against the CUDA-core kernel, each run its own process, alternating: DecodeAttention.Rate
# (8B decode shapes, f16 / fp8 pages), the Qwen3.5-27B shape (Q4_0) at 8 x 32K dense with f16 /
# int8 / fp8 KV (issue 15's row), the 8B (Q4_0) at 1 x 128K dense f16 / int8.
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
date -u +"%F %T UTC"
HS_CUDA_ATTN_MMA=1 timeout 240 $B/hs_unit_tests --gtest_filter='AttentionOps*:DecodeAttention*:SparseAttentionOps*:HostTierOps*' \
  > $OUT/mma-tests.log 2>&1; echo "mma tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |Failure|max" $OUT/mma-tests.log | head -20
for m in 0 1; do
  HS_CUDA_ATTN_MMA=$m HS_ATTN_BENCH=1 timeout 60 $B/hs_unit_tests --gtest_filter='DecodeAttention.Rate' > $OUT/rate$m.log 2>&1
  echo "rate mma=$m rc $?"; grep -E "keys|GB/s" $OUT/rate$m.log | head -12
done
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0 -p 0 -n 0 -r 1 --batched 8:32768 --batched-gen 32"
for kvt in f16 int8 fp8; do
  for m in 0 1; do
    HS_CUDA_ATTN_MMA=$m timeout 100 $B/hindsight bench $C27 --kv-cache-dtype $kvt --json $OUT/h27-$kvt-$m.json > $OUT/h27-$kvt-$m.log 2>&1
    echo "27B 8x32K $kvt mma=$m rc $?"; grep "^| qwen" $OUT/h27-$kvt-$m.log | cut -d'|' -f9-14
  done
done
C8="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0 -p 0 -r 1 -n 32 -d 131072"
for kvt in f16 int8; do
  for m in 0 1; do
    HS_CUDA_ATTN_MMA=$m timeout 80 $B/hindsight bench $C8 --kv-cache-dtype $kvt > $OUT/h8-$kvt-$m.log 2>&1
    echo "8B 1x128K $kvt mma=$m rc $?"; grep "^| llama" $OUT/h8-$kvt-$m.log | cut -d'|' -f9-14
  done
done
date -u +"%F %T UTC"
