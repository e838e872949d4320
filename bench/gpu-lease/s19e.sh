#!/bin/bash
# Session 19, call 5: the hot set's kernels narrower (resolve 256 threads a kv head instead of
# 1024, gather 16 CTAs a kv head instead of 64) against s19d's host-tier rows; tests first.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 100 $B/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |host tier:" $OUT/ops.log | head -12
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 64 -r 2 --sparse sketch --sketch random"
HT="--kv-tier host --device-kv-budget 4294967296"
timeout 240 $B/hindsight bench $C -d 131072 262144 --batched 8:32768 --batched 4:131072 $HT --json $OUT/host.json > $OUT/host.log 2>&1; echo "host rc $?"
grep -E "^\| llama" $OUT/host.log | cut -c1-300
