#!/bin/bash
# Session 20, call 8: hierarchical scoring (--sparse-page-shortlist N: page summaries bound every
# candidate, the best N scored token by token). The sparse suites, then 1 x 128K / 256K
# device-resident sparse and 8 x 256K on the int4 host tier (rank 16) with shortlist 512 (4 x the
# budget's 128 chunks), against the flat rows of s20d / s20f (163.70 / 142.52, 562.14 / 434.23).
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 100 $B/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |hierarchical|sparse select" $OUT/ops.log | head -20
grep -B2 -A8 "Failure" $OUT/ops.log | head -30
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 --sparse sketch --sparse-page-shortlist 512"
run() { local name=$1; shift; timeout ${T:-100} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|forced|device sparse|rror" $OUT/$name.log | cut -c1-260 | head -6; }
T=100 run dev -n 64 -d 131072 262144 --sketch random
H="-n 0 --sketch random:16 --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 --batched 8:262144 --batched-gen 64"
T=90 run b8 $H
HS_CUDA_HOT_FORCE_MISS=0.282 T=90 run b8_m282 $H
