#!/bin/bash
# Next lease, after s24a.sh (llama.cpp built in the background from a pack that keeps the qwen35
# vocabulary and make_dummy_qwen35_gguf.py): issue 15's same-run table on the Qwen3.5-27B shape.
# llama.cpp's Q4_0 27B weights are generated first (CPU), then hindsight's rows (GPU idle
# otherwise), then llama.cpp's bench35 / batched35. Results in $OUT.
for i in $(seq 1 40); do grep -q "build done\|done before" /root/peerout/setup.log && break; sleep 5; done
OUT_PEER=/root/peerout
(OUT=$OUT_PEER bash /root/peerpack/run.sh gen35 > $OUT_PEER/gen35.log 2>&1)
date -u +"%F %T UTC"
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
timeout 300 /root/stage/hs/hindsight bench --device cuda --load-format dummy --config configs/qwen3.5-27b.json \
  --dummy-dtype q4_0 -p 512 -n 128 -d 0 -r 2 --batched 1:512 --batched 8:512 --batched 32:512 --batched 8:32768 \
  --batched-gen 128 --json $OUT/h27.json > $OUT/h27.log 2>&1; echo "hindsight rc $?"
grep "^| qwen\|peaks" $OUT/h27.log | cut -c1-220
date -u +"%F %T UTC"
OUT=$OUT timeout 240 bash /root/peerpack/run.sh bench35 batched35 2>&1 | grep -v "^$" | tail -16
date -u +"%F %T UTC"
