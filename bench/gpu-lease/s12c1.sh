#!/bin/bash
# Session 12, call 1: main's last two commits (PDL launcher refactor, Weights16) and this session's
# fusions on the GPU: op tests; then the 8B shape with the fused RoPE + KV write (HS_CUDA_ROPE_KV)
# and the norm / GLU writing the quantized GEMV's x records (HS_CUDA_EARLYQ) off and on. Stages
# SmolLM2 part 1.
mkdir -p /root/stage/m && tar xzf ${HS_BUNDLE:-.gpu/b2}/bins.tgz -C /root/stage && mv .gpu/sa/smol.00 /root/stage/m/
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 240 $H/hs_unit_tests --gtest_filter='BackendOps.*:AttentionOps.*:BackendOpsFp8.*:BiasOps.*:Gemm16Mma.*:GemvWarp.*:QuantWarp*:QuantGemv.*:QuantLayout.*:RmsNormKernel.*:DecodeAttention.*:FlashPrefill.*' > $OUT/ops.txt 2>&1; echo "ops rc $?"
grep -E "FAILED|PASSED|Failure|tests ran" $OUT/ops.txt | head -20
grep -E "FAIL" $OUT/ops.txt | head -20
B="$H/hindsight bench --device cuda --load-format dummy --config configs/llama-3.1-8b.json"
for cfg in 0:0 1:0 1:1 0:0 1:1; do
  a=${cfg%:*}; r=${cfg#*:}
  HS_CUDA_PDL_ALL=$a HS_CUDA_ROPE_KV=$r timeout 100 $B --dummy-dtype bf16 -p 0 -n 128 -d 0 --batched 8:512 --batched 8:32768 -r 2 \
    --json $OUT/bf16_a${a}_r$r.json > $OUT/bf16_a${a}_r$r.txt 2>&1
  echo "bf16 pdl_all=$a rope_kv=$r rc $?"; grep -E "^\| .*(tg|batched)" $OUT/bf16_a${a}_r$r.txt | cut -c120-175
done
for cfg in 0:0:0 1:0:0 1:1:0 1:0:1 1:1:1 1:0:0; do
  a=${cfg%%:*}; rest=${cfg#*:}; e=${rest%:*}; r=${rest#*:}
  HS_CUDA_PDL_ALL=$a HS_CUDA_EARLYQ=$e HS_CUDA_ROPE_KV=$r timeout 100 $B --dummy-dtype q4_0 -p 0 -n 128 -d 0 -r 2 > $OUT/q40_a${a}_e${e}_r$r.txt 2>&1
  echo "q4_0 pdl_all=$a earlyq=$e rope_kv=$r rc $?"; grep -E "^\| .*tg" $OUT/q40_a${a}_e${e}_r$r.txt | cut -c120-175
done
date +%T
