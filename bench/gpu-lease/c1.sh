#!/bin/bash
# Same-run lease, call 1: peer build in the background; our op tests in the foreground.
mkdir -p /root/stage/m && python3 -m tarfile -e ${HS_BUNDLE:-.gpu/bundle}/bins.txz /root/stage
mkdir -p /root/peerpack && cp ${HS_PEER:-.gpu/peer}/* /root/peerpack/
(setsid nohup bash /root/peerpack/run.sh build gen quant > /root/peer-setup.log 2>&1 &)
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
U=/root/stage/hs/hs_unit_tests
timeout 300 $U --gtest_filter='BackendOps*:AttentionOps*:QuantGemv*:FlashPrefill*:DecodeAttention*:GemvWarp*:QuantWarpGemv*:RmsNormKernel*' > $OUT/ops.log 2>&1; echo "ops rc $?"
grep -E "FAIL|PASSED|FAILED|Failure" $OUT/ops.log | head -20
grep -E "^(backend ops:|op  |[a-z_]+ {2,}\S)" $OUT/ops.log | grep -E "matmul_multi|add_rms|rope_qk" | head -30
cat /root/peer-setup.log
