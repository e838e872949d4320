#!/bin/bash
# Session 19, call 1: the GPU host tier (--kv-tier host, hot_set.h). The sparse / attention op
# suites with the new HostTierOps tests, then on the 8B shape (bf16 weights, synthetic zeroed
# KV): the device-resident path dense vs sparse (--sparse-compare) at 128K and 256K, the host
# tier's sparse decode at the same depths and at 8 x 32K, and the host tier with every selected
# piece a miss (HS_CUDA_HOT_FORCE_MISS=1: the worst case).
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 150 $B/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*:AttentionOps*:BackendOps*:DecodeAttention*:FlashPrefill*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |host tier:" $OUT/ops.log | head -20
grep -B2 -A8 "Failure" $OUT/ops.log | head -60
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 64 -r 2 --sparse sketch --sketch random"
HT="--kv-tier host --device-kv-budget 4294967296"
run() { local name=$1; shift; timeout ${T:-140} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|hot set|host tier" $OUT/$name.log | cut -c1-300 | head -8; }
T=170 run device -d 131072 262144 --sparse-compare
T=150 run host -d 131072 262144 --batched 8:32768 $HT
export HS_CUDA_HOT_FORCE_MISS=1; T=120 run host_miss -d 131072 $HT
