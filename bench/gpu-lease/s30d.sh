#!/bin/bash
# Session 27: issue 14's bf16 rows in one call (after s30c.sh; llama.cpp's F16 8B from s30a.sh's
# `run.sh gen`): 1 x 128K / 256K sparse against own dense, 8 x 256K int4 host tier, 8 x 32K dense
# and sparse; then llama.cpp F16 with q8_0 KV at 1 x 256K and 8 x 32K (s28a.sh).
date -u +"%F %T UTC"
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 --sparse sketch"
run() { local name=$1; shift; timeout ${T:-120} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|device sparse|rror" $OUT/$name.log | cut -c1-260 | head -6; }
T=150 run bf_d1 -n 32 -d 131072 262144 --sketch random --sparse-compare
run bf_b8 -n 0 --sketch random:16 --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 --batched 8:262144 --batched-gen 32
run bf_8x32k_dense -n 0 --sketch random --batched 8:32768 --batched-gen 32 --sparse-min-context 1000000
run bf_8x32k_sparse -n 0 --sketch random --batched 8:32768 --batched-gen 32 --sparse-min-context 0
W=/tmp/peer; timeout 200 $W/build/bin/llama-bench -m $W/f16.gguf -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -p 0 -n 32 -d 262144 -r 1 -o md 2>/dev/null | tee $OUT/peer-256k-q8.md
bash bench/gpu-lease/s28a.sh
