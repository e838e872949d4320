#!/bin/bash
# Session 19, call 3: per-op device times (HS_CUDA_PROFILE=1, eager) of a 1 x 128K sparse decode,
# device-resident against the host tier: where the host tier's extra time goes.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 32 -r 1 --sparse sketch --sketch random -d 131072"
export HS_CUDA_PROFILE=1
timeout 120 $B/hindsight bench $C > $OUT/dev_prof.log 2>&1; echo "dev rc $?"
timeout 120 $B/hindsight bench $C --kv-tier host --device-kv-budget 4294967296 > $OUT/host_prof.log 2>&1; echo "host rc $?"
for f in dev_prof host_prof; do echo "== $f"; grep -vE "^\[|^$" $OUT/$f.log | grep -iE "us|ms|%" | head -30; done
