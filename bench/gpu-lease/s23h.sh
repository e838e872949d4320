#!/bin/bash
# Session 23: HostTierOps.AStormOfStartsAndEndsStaysExactAndReturnsToBaseline failed at seed
# 1804309288233957682 (round 4, one sequence's outputs); rerun it with the per-row diagnosis
# (selections of both tiers), then four fresh seeds.
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
T=/root/stage/hs/hs_unit_tests
HS_TEST_SEED=1804309288233957682 timeout 60 $T --gtest_filter='HostTierOps.AStorm*' 2>&1 | grep -E "storm round|seq |OK \]|FAILED  \]" | cut -c1-1500 | head -12
for i in 1 2; do env -u HS_TEST_SEED timeout 60 $T --gtest_filter='HostTierOps.AStorm*' 2>&1 | grep -E "storm round|host tier storm|FAILED  \]" | cut -c1-400 | head -3; done
