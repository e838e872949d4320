#!/bin/bash
# hindsight, same machine, right after the peer.
date -u +"%F %T UTC"
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs/hindsight
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json"
timeout 280 $H bench $C --dummy-dtype bf16 -p 512 8192 -n 128 -d 0 32768 131072 --batched 1:512 --batched 8:512 --batched 32:512 --batched 64:512 --batched 8:32768 -r 2 --json $OUT/hs-bf16.json > $OUT/hs-bf16.log 2>&1
grep "^| \|peaks\|roofline" $OUT/hs-bf16.log | head -30
timeout 120 $H bench $C --dummy-dtype q4_0 -p 512 -n 128 -d 0 --batched 8:512 -r 2 --json $OUT/hs-q4_0.json > $OUT/hs-q4_0.log 2>&1
grep "^| llama" $OUT/hs-q4_0.log
timeout 150 $H bench $C --dummy-dtype bf16 --kv-cache-dtype fp8 -p 0 -n 128 -d 131072 --batched 8:32768 -r 2 --json $OUT/hs-fp8kv.json > $OUT/hs-fp8kv.log 2>&1
grep "^| llama" $OUT/hs-fp8kv.log
