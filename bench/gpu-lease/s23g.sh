#!/bin/bash
# Session 23, second lease (carry .gpu/bundle): the exact rerank's mass kernel taking a page's
# tokens at once (lane = token x slice of head_dim) and the ranking in one pass. The sparse and
# host-tier suites; the warp-GEMV suite at the seed that failed in the first lease; then the 8B
# shape at 1 x 128K / 256K, dense and sparse (default: rerank 8x) and --sparse-rerank 0, as s23f;
# the eager per-stage profile of a 128K step with and without the rerank.
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 150 $B/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*' > $OUT/sparse.log 2>&1; echo "sparse rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |exact rerank:" $OUT/sparse.log | head -12
grep -B2 -A8 "Failure" $OUT/sparse.log | head -30
HS_TEST_SEED=5334893114480632864 timeout 100 $B/hs_unit_tests --gtest_filter='QuantWarpGemv.MultiWeight*:QuantWarpGemv.EveryPlan*' > $OUT/warp.log 2>&1
echo "warp (seed of lease 1) rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/warp.log | head -5
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 --sparse sketch --sketch random"
run() { local name=$1; shift; timeout ${T:-120} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|rror" $OUT/$name.log | cut -c1-230 | head -6; }
T=150 run d1 -n 32 -d 131072 262144 --sparse-compare
T=80 run rr0 -n 32 -d 131072 262144 --sparse-rerank 0
for r in auto 0; do
  HS_CUDA_PROFILE=1 timeout 90 $B/hindsight bench $C -n 8 -d 131072 --sparse-rerank $r > $OUT/prof-$r.log 2>&1
  echo "profile rerank $r rc $?"; grep -E "^cuda op profile|^\| (attention|matmul)" $OUT/prof-$r.log | cut -c1-160 | head -14
done
