#!/bin/bash
# Session 20, call 9: the sparse suites again with the hierarchical test on page-clustered keys.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
for i in 1 2; do
timeout 100 $B/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*' > $OUT/ops$i.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |hierarchical" $OUT/ops$i.log | head -8
grep -B2 -A8 "Failure" $OUT/ops$i.log | head -20
done
