#!/bin/bash
# Session 29: issue 15's rows in one run on the lease's remaining minutes (after s30a.sh started
# llama.cpp's build; carry the qwen35 vocabulary as .gpu/qv/ggml-vocab-qwen35.gguf): s30q.sh
# without its F16-KV rows: llama.cpp's random Q4_0 27B (gen35), hindsight's tg128 and 8 x 32K with
# int8 KV, then llama.cpp's tg128 and 8 x 32K with q8_0 KV.
for i in $(seq 1 60); do grep -q "build done\|done before" /root/peerout/setup.log && break; sleep 4; done
tail -2 /root/peerout/setup.log
W=/tmp/peer
[ -f /root/peerpack/ggml-vocab-qwen35.gguf ] || cp .gpu/qv/ggml-vocab-qwen35.gguf /root/peerpack/
date -u +"%F %T UTC"; (OUT=/root/peerout bash /root/peerpack/run.sh gen35 > /root/peerout/gen35.log 2>&1); tail -1 /root/peerout/gen35.log
date -u +"%F %T UTC"
export LD_LIBRARY_PATH=/root/st/hs/lib:/usr/local/cuda/lib64
B=/root/st/hs/hindsight
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
HS_CUDA_ATTN_MMA=1 timeout 90 $B bench $C27 -p 512 -n 128 -d 0 -r 2 > $OUT/h27tg.log 2>&1; echo "hs tg rc $?"; grep "^| qwen" $OUT/h27tg.log | cut -d'|' -f9-12
HS_CUDA_ATTN_MMA=1 timeout 90 $B bench $C27 -p 0 -n 0 -r 1 --batched 8:32768 --batched-gen 32 --kv-cache-dtype int8 \
  --json $OUT/h27b8-int8.json > $OUT/h27b8-int8.log 2>&1; echo "hs 8x32K int8 rc $?"; grep "^| qwen" $OUT/h27b8-int8.log | cut -d'|' -f9-12
date -u +"%F %T UTC"
timeout 60 $W/build/bin/llama-bench -m $W/q35-q4_0.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 2 -o md 2>&1 | grep -E "^\|" | tee $OUT/peer-tg.md
date -u +"%F %T UTC"
timeout 200 $W/build/bin/llama-batched-bench -m $W/q35-q4_0.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -c 266240 -b 2048 -ub 512 \
  -npp 32768 -ntg 32 -npl 8 2>&1 | tail -3 | tee $OUT/peer-8x32k-q8_0.txt
date -u +"%F %T UTC"
