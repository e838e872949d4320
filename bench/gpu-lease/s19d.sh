#!/bin/bash
# Session 19, call 4: the host tier with the growing page topped up from the step's own K / V
# (no refetch per step). Tests, then one run per placement on the 8B shape (bf16 weights,
# synthetic zeroed KV): device-resident dense vs sparse at 128K / 256K; the host tier's sparse
# decode at 128K / 256K, 8 x 32K and 4 x 128K; the host tier with every piece a miss at 128K.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
for i in 1 2; do
timeout 100 $B/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*:AttentionOps*:DecodeAttention*' > $OUT/ops$i.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |host tier:" $OUT/ops$i.log | head -12
grep -B2 -A8 "Failure" $OUT/ops$i.log | head -30
done
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 64 -r 2 --sparse sketch --sketch random"
HT="--kv-tier host --device-kv-budget 4294967296"
run() { local name=$1; shift; timeout ${T:-140} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|hot set|host tier" $OUT/$name.log | cut -c1-300 | head -8; }
T=170 run device -d 131072 262144 --sparse-compare
T=240 run host -d 131072 262144 --batched 8:32768 --batched 4:131072 $HT
export HS_CUDA_HOT_FORCE_MISS=1; T=120 run host_miss -d 131072 $HT
