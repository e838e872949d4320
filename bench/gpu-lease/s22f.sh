#!/bin/bash
# Session 22: what the GPU's exact rerank costs (8B shape, bf16 dummy weights, synthetic KV on the
# device, random rank-32 sketch): 1 x 128K and 1 x 32K, dense / sparse without the rerank / sparse
# with --sparse-rerank 8 (the auto default on the device tier), one process each.
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
B=/root/stage/hs
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 64 -r 2 --sparse sketch --sketch random:32"
run() { local name=$1; shift; timeout 120 $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|rerank" $OUT/$name.log | cut -c1-230 | head -4; }
run rr0 -d 32768 131072 --sparse-compare --sparse-rerank 0
run rr8 -d 32768 131072 --sparse-rerank 8
