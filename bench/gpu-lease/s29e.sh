#!/bin/bash
# Session 26: issue 15's 8 x 32K row at 8-bit KV on both sides (after s26q.sh, which built
# llama.cpp's Q4_0 27B: /tmp/peer/q35-q4_0.gguf). The F16-KV row reads 17.2 GB of K / V a step
# (16 full-attention layers x 4 kv heads x 256 x 2 x 2 bytes x 8 x 32K) beside the 15 GB of Q4_0
# weights; int8 / fp8 pages halve it. llama.cpp's 8-bit KV is q8_0 (-ctk q8_0 -ctv q8_0), its
# best long-context setting (issue 14). Dense attention both; hindsight's context is synthetic.
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0 -p 0 -n 0 -r 1"
date -u +"%F %T UTC"
for kvt in f16 int8 fp8; do
  timeout 120 $B/hindsight bench $C27 --kv-cache-dtype $kvt --batched 8:32768 --batched-gen 64 \
    --json $OUT/h27kv-$kvt.json > $OUT/h27kv-$kvt.log 2>&1; echo "hindsight $kvt rc $?"
  grep "^| qwen" $OUT/h27kv-$kvt.log | cut -d'|' -f9-16
done
date -u +"%F %T UTC"
W=/tmp/peer
timeout 300 $W/build/bin/llama-batched-bench -m $W/q35-q4_0.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -c 266240 -b 2048 \
  -ub 512 -npp 32768 -ntg 32 -npl 8 2>&1 | tail -3 | tee $OUT/peer35-8x32k-q8.txt
date -u +"%F %T UTC"
