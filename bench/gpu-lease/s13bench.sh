#!/bin/bash
# Session 13: the 8B dummy shape, dense against GPU sparse attention in the same run
# (--sparse-compare: every tg @ depth dense first, then sparse; random sketch basis; budget
# 2048, sinks 16, window 256, 16-token chunks = pages).
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs/hindsight
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json"
timeout 400 $H bench $C --dummy-dtype bf16 -p 0 -n 64 -d 32768 131072 262144 --sparse sketch --sketch random \
  --sparse-compare -r 2 --json $OUT/sparse-bf16.json > $OUT/sparse-bf16.log 2>&1; echo "bench rc $?"
grep -E "^\|" $OUT/sparse-bf16.log | cut -c1-250
tail -5 $OUT/sparse-bf16.log
