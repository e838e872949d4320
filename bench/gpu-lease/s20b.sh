#!/bin/bash
# Session 20, call 2: 8 x 256K decoding together on the host tier with int4 host KV (73 GB
# pinned), 8B shape, bf16 weights, synthetic zeroed KV; sketches rank 32 (default) and 16; the
# hit path, the real-text miss rate (0.282) and every piece a miss.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
free -g | head -2
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 0 -r 1 --sparse sketch --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 --batched-gen 64"
run() { local name=$1; shift; /usr/bin/time -v timeout ${T:-200} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|hot set|device sparse memory|forced|Maximum resident|Elapsed" $OUT/$name.log | cut -c1-300 | head -10; }
T=200 run b8x256k_r16 --sketch random:16 --batched 8:262144
HS_CUDA_HOT_FORCE_MISS=0.282 T=150 run b8x256k_r16_m282 --sketch random:16 --batched 8:262144
T=150 run b8x256k_r32_m282 --sketch random --batched 8:262144 
