#!/bin/bash
cat /root/stage/m/smol.00 ${HS_SMOL:-.gpu}/s1/smol.01 > /root/stage/m/smollm2-135m-instruct-q4_1.gguf && rm /root/stage/m/smol.00
sha256sum /root/stage/m/smollm2-135m-instruct-q4_1.gguf | cut -c1-16
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
U=/root/stage/hs/hs_unit_tests
HS_MODELS_DIR=/root/stage/m timeout 200 $U --gtest_filter='*Golden*smollm2_cuda*:*GraphTest*smollm2*' > $OUT/golden.log 2>&1; echo "golden rc $?"
grep -E "^\[golden\]|FAIL|PASSED|Failure" $OUT/golden.log | head -30
# wait for the peer's build / gen / quant (background since call 1)
for i in $(seq 1 100); do grep -q "quant done" /root/peer-setup.log && break; sleep 5; done
cat /root/peer-setup.log; date +%T
