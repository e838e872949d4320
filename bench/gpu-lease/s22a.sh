#!/bin/bash
# Session 22, call 1 (carry .gpu/bundle .gpu/peer): unpack the binaries; llama.cpp's build, F16
# generation and Q4_0 quantization start in the background (OUT=/root/peerout); the sparse and
# host-tier op suites run on the new sketch_rebuild kernel (one template over plain and scaled pages).
mkdir -p /root/stage /root/peerout && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage
cp -r .gpu/peer /root/peerpack
(OUT=/root/peerout setsid nohup bash /root/peerpack/run.sh build gen quant > /root/peerout/setup.log 2>&1 < /dev/null &)
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
timeout 240 /root/stage/hs/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*' > $OUT/sparse.log 2>&1; echo "sparse rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/sparse.log | head -20
grep -B2 -A8 "Failure" $OUT/sparse.log | head -30
