#!/bin/bash
# Session 19, call 6: A/B in one lease of the hot set's gather: a separate kernel (16 CTAs a kv
# head) against the resolve CTAs copying the misses themselves (HS_CUDA_HOT_GATHER=fused); tests
# in both modes first; the worst case (every piece a miss) in both.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
for g in separate fused; do
HS_CUDA_HOT_GATHER=$g timeout 100 $B/hs_unit_tests --gtest_filter='HostTierOps*' > $OUT/ops_$g.log 2>&1; echo "tests $g rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/ops_$g.log | head -6
done
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -n 64 -r 2 --sparse sketch --sketch random --kv-tier host --device-kv-budget 4294967296"
for round in 1 2; do for g in separate fused; do
HS_CUDA_HOT_GATHER=$g timeout 120 $B/hindsight bench $C -d 131072 --batched 4:131072 --json $OUT/${g}_$round.json > $OUT/${g}_$round.log 2>&1; echo "$g $round rc $?"
grep -E "^\| llama" $OUT/${g}_$round.log | cut -c100-300
done; done
for g in separate fused; do
HS_CUDA_HOT_FORCE_MISS=1 HS_CUDA_HOT_GATHER=$g timeout 120 $B/hindsight bench $C  -d 131072 > $OUT/miss_$g.log 2>&1; echo "miss $g rc $?"
grep -E "^\| llama" $OUT/miss_$g.log | cut -c100-300
done
