#!/bin/bash
# Session 15: hindsight on the Qwen3.5-27B shape (dummy Q4_0 weights), batch 1 and batched decode,
# while llama.cpp builds (CPU only). Carried .gpu/bundle.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
timeout 560 /root/stage/hs/hindsight bench --device cuda --load-format dummy --config configs/qwen3.5-27b.json \
  --dummy-dtype q4_0 -p 512 -n 128 -d 0 -r 2 --batched 1:512 --batched 8:512 --batched 32:512 --batched 8:32768 \
  --batched-gen 128 --json $OUT/h27.json > $OUT/h27.log 2>&1; echo "rc $?"
grep "^|" $OUT/h27.log; tail -3 /root/peerout/run1.log
