#!/bin/bash
# Session 20, call 10: the defaults after hierarchical scoring became auto on the GPU (no
# --sparse-page-shortlist flag: 4 x the budget's 128 chunks): 1 x 256K device sparse and 8 x 256K
# on the int4 host tier (rank 16), against s20h's explicit --sparse-page-shortlist 512 rows.
mkdir -p /root/stage && tar xzf .gpu/bench/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 --sparse sketch"
run() { local name=$1; shift; timeout ${T:-90} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|device sparse|rror" $OUT/$name.log | cut -c1-260 | head -4; }
T=70 run dev -n 32 -d 262144 --sketch random
T=80 run b8 -n 0 --sketch random:16 --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 --batched 8:262144 --batched-gen 32
