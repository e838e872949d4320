#!/bin/bash
# Session 20, call 7: the peer in the same lease as s20f's rows: llama-batched-bench 8 x 32K (F16
# KV, prompt 32768, 32 generated) and llama-bench tg32 at depth 262144 with q8_0 KV.
W=/tmp/peer
for i in $(seq 1 30); do grep -q "gen done" /root/peerout/run1.log 2>/dev/null && break; sleep 10; done
tail -3 /root/peerout/run1.log
timeout 200 $W/build/bin/llama-batched-bench -m $W/f16.gguf -ngl 99 -fa 1 -c 266240 -b 2048 -ub 512 -npp 32768 -ntg 32 -npl 8 2>&1 | tail -3 | tee $OUT/peer-8x32k.txt
timeout 330 $W/build/bin/llama-bench -m $W/f16.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -p 0 -n 32 -d 262144 -r 1 -o md 2>&1 | tail -4 | tee $OUT/peer-256k-q8.md
