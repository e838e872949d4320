#!/bin/bash
# Session 19, call 2: the host tier's victim search mended (it scanned one window only); the
# sparse / host-tier tests again, then where the host tier's step time goes (HS_CUDA_PROFILE=1,
# 1 x 128K) and 4 x 128K on the host tier.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
for i in 1 2 3; do
timeout 100 $B/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*' > $OUT/ops$i.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |host tier:" $OUT/ops$i.log | head -20
grep -B2 -A8 "Failure" $OUT/ops$i.log | head -40
done
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 64 -r 2 --sparse sketch --sketch random"
HT="--kv-tier host --device-kv-budget 4294967296"
run() { local name=$1; shift; timeout ${T:-140} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|hot set|host tier" $OUT/$name.log | cut -c1-300 | head -8; }
export HS_CUDA_PROFILE=1; T=120 run host_prof -d 131072 $HT -r 1
grep -iE "attention|hot|sparse|kv_write|rope" $OUT/host_prof.log | head -20
unset HS_CUDA_PROFILE; T=200 run host4 -d 131072 --batched 4:131072 $HT
