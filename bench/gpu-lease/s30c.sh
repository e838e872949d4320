#!/bin/bash
# Session 27: issue 14's remaining Q4_0 rows in one call (after s29c.sh / s29f.sh; binaries in
# /root/st from s30a.sh): the 8 x 32K rows dense (--sparse-min-context 1000000) and sparse (0),
# the dense path at the largest batch that fits at 256K (2 x 256K, f16 KV), then llama.cpp Q4_0
# at 8 x 32K with q8_0 KV (s29d.sh).
date -u +"%F %T UTC"
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype q4_0 -p 0 -r 1 --sparse sketch --sketch random"
run() { local name=$1; shift; timeout ${T:-120} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|device sparse|rror" $OUT/$name.log | cut -c1-260 | head -4; }
run q4_8x32k_dense -n 0 --batched 8:32768 --batched-gen 32 --sparse-min-context 1000000
run q4_8x32k_sparse -n 0 --batched 8:32768 --batched-gen 32 --sparse-min-context 0
run q4_2x256k_dense -n 0 --batched 2:262144 --batched-gen 32 --sparse-min-context 1000000
bash bench/gpu-lease/s29d.sh
