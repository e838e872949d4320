#!/bin/bash
# Session 22: the rerank chained after the page bounds (hierarchical scoring first, then the
# sketch scores of the bounds' best pages, then the exact rerank): the sparse suites, then the
# 8B shape at 1 x 32K / 128K / 256K with the rerank after a bounds shortlist of 2048 pages
# against --sparse-rerank 0 (bounds shortlist 512), as s22f.
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 150 $B/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*' > $OUT/sparse.log 2>&1; echo "sparse rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |exact rerank:" $OUT/sparse.log | head -12
grep -B2 -A8 "Failure" $OUT/sparse.log | head -30
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 32 -r 1 --sparse sketch --sketch random:32"
run() { local name=$1; shift; timeout 120 $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama" $OUT/$name.log | cut -c1-230 | head -4; }
run chain -d 32768 131072 262144 --sparse-page-shortlist 2048
run rr0 -d 131072 262144 --sparse-rerank 0
