#!/bin/bash
# Session 20, call 6: the peer (llama.cpp, carried .gpu/peer) builds and generates its F16
# 8B-shape GGUF in the background while hindsight's same-lease rows run: 1 x 256K device dense vs
# sparse (f16 KV), and the int4 host tier (rank-32 sketches) at 1 x 256K and 8 x 32K, at the hit
# path and the real-text miss rate. s20g.sh then times the peer at 8 x 32K and 1 x 256K (q8_0 KV).
mkdir -p /root/peerout && rm -rf /root/peer && cp -r .gpu/peer /root/peer
OUT=/root/peerout setsid nohup bash /root/peer/run.sh build gen > /root/peerout/run1.log 2>&1 < /dev/null &
mkdir -p /root/stage && tar xzf .gpu/bench/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 --sparse sketch"
run() { local name=$1; shift; timeout ${T:-150} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|forced|device sparse" $OUT/$name.log | cut -c1-260 | head -6; }
T=150 run dev256 -n 64 -d 262144 --sketch random --sparse-compare
H="--sketch random --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 -n 64 -d 262144 --batched 8:32768 --batched-gen 64"
T=150 run host $H
HS_CUDA_HOT_FORCE_MISS=0.282 T=150 run host_m282 $H
for i in $(seq 1 40); do grep -q "gen done" /root/peerout/run1.log 2>/dev/null && break; sleep 10; done
tail -4 /root/peerout/run1.log
