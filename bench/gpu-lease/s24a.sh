#!/bin/bash
# Next lease, first call (carry .gpu/bundle .gpu/peer): as s22a.sh (unpack; llama.cpp's build in
# the background; the sparse and host-tier suites), then the host-tier storm at the seed that
# failed in session 23 (the top-k padding taken as block 0: fixed since) and at three fresh seeds.
bash bench/gpu-lease/s22a.sh
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
T=/root/stage/hs/hs_unit_tests
HS_TEST_SEED=1804309288233957682 timeout 60 $T --gtest_filter='HostTierOps.AStorm*' 2>&1 | grep -E "storm round|seq |host tier storm|FAILED  \]" | cut -c1-600 | head -8
for i in 1 2 3; do env -u HS_TEST_SEED timeout 60 $T --gtest_filter='HostTierOps.AStorm*' 2>&1 | grep -E "storm round|host tier storm|FAILED  \]" | cut -c1-400 | head -3; done
