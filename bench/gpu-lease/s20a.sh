#!/bin/bash
# Session 20, call 1: int8 / int4 KV on CUDA (scaled pages, kv_write bytes = host's, attention
# over them, the host tier's slots holding encoded pieces). Tests, then the 8B shape (bf16
# weights, synthetic zeroed KV) at 1 x 128K: device-resident dense vs sparse per KV dtype, and
# the host tier per dtype at the hit path and at the real-text miss rate (0.282, docs/benchmarks.md).
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 200 $B/hs_unit_tests --gtest_filter='BackendOps*:AttentionOps*:SparseAttentionOps*:HostTierOps*:DecodeAttention*:FlashPrefill*:HybridOps*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |host tier:" $OUT/ops.log | head -20
grep -B2 -A8 "Failure" $OUT/ops.log | head -40
grep -E "int8|int4" $OUT/ops.log | grep -E "FAIL" | head
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 64 -r 2 --sparse sketch --sketch random"
HT="--kv-tier host --device-kv-budget 4294967296"
run() { local name=$1; shift; timeout ${T:-140} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|hot set|device sparse memory|forced" $OUT/$name.log | cut -c1-300 | head -8; }
for dt in f16 int8 int4; do T=120 run dev_$dt -d 131072 --sparse-compare --kv-cache-dtype $dt; done
for dt in f16 int4; do T=90 run host_$dt -d 131072 $HT --kv-cache-dtype $dt; done
export HS_CUDA_HOT_FORCE_MISS=0.282
for dt in f16 int4; do T=90 run host_m282_$dt -d 131072 $HT --kv-cache-dtype $dt; done
