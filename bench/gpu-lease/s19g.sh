#!/bin/bash
# Session 19, call 7: the separate gather kernel removed (the resolve copies the misses): the
# sparse / host-tier / attention tests on the final binary, twice with fresh seeds.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
for i in 1 2; do
timeout 100 $B/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*:AttentionOps*:DecodeAttention*:BackendOps*' > $OUT/ops$i.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |host tier:" $OUT/ops$i.log | head -12
done
