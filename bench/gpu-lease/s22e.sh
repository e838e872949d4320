#!/bin/bash
# Session 22: llama.cpp's rows (same machine, right after hindsight's; F16 KV, flash attention on).
date -u +"%F %T UTC"
W=/tmp/peer; B=$W/build/bin
$B/llama-bench -m $W/f16.gguf -ngl 99 -fa 1 -p 512,8192 -n 128 -r 3 -o md 2>/dev/null | tee $OUT/peer-f16.md
$B/llama-bench -m $W/q4_0.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o md 2>/dev/null | tee $OUT/peer-q4_0.md
$B/llama-bench -m $W/f16.gguf -ngl 99 -fa 1 -p 0 -n 64 -d 32768,131072 -r 1 -o md 2>/dev/null | tee $OUT/peer-depth.md
$B/llama-batched-bench -m $W/f16.gguf -ngl 99 -fa 1 -c 70000 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,8,32,64 2>&1 | tail -8 | tee $OUT/peer-batched.txt
$B/llama-batched-bench -m $W/f16.gguf -ngl 99 -fa 1 -c 266240 -b 2048 -ub 512 -npp 32768 -ntg 32 -npl 8 2>&1 | tail -3 | tee $OUT/peer-8x32k.txt
date -u +"%F %T UTC"
