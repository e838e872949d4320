#!/bin/bash
# Session 13, final call: one run, dense against GPU sparse attention (--sparse-compare) on the 8B
# shape: tg64 at 32K / 128K / 256K for one sequence, and 8 x 32K and 4 x 128K decoding together.
mkdir -p /root/stage && tar xzf ${HS_BUNDLE:-.gpu/b14}/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs/hindsight
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json"
timeout 500 $H bench $C --dummy-dtype bf16 -p 0 -n 64 -d 32768 131072 262144 --batched 8:32768 --batched 4:131072 \
  --sparse sketch --sketch random --sparse-compare -r 2 --json $OUT/final.json > $OUT/final.log 2>&1; echo "bench rc $?"
grep -E "^\| llama" $OUT/final.log | cut -c88-260
