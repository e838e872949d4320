#!/bin/bash
# Session 22: issue 13's rows, hindsight (machine otherwise idle: llama.cpp's setup finished).
date -u +"%F %T UTC"
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs/hindsight
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json"
timeout 330 $H bench $C --dummy-dtype bf16 -p 512 8192 -n 128 -d 0 32768 131072 --batched 1:512 --batched 8:512 --batched 32:512 --batched 64:512 --batched 8:32768 -r 2 --json $OUT/hs-bf16.json > $OUT/hs-bf16.log 2>&1
echo "bf16 rc $?"; grep "^| \|peaks\|roofline" $OUT/hs-bf16.log | cut -c1-220 | head -30
timeout 150 $H bench $C --dummy-dtype q4_0 -p 512 -n 128 -d 0 --batched 8:512 -r 2 --json $OUT/hs-q4_0.json > $OUT/hs-q4_0.log 2>&1
echo "q4_0 rc $?"; grep "^| llama" $OUT/hs-q4_0.log | cut -c1-220
