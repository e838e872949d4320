#!/bin/bash
# Next lease, after s26a.sh (llama.cpp built in the background from a pack with its qwen35 files):
# issue 15's same-run table on the Qwen3.5-27B shape, as s24q.sh, plus the sparse 8 x 32K rows:
# with the exact rerank (the auto rule: 8 x the 2048 budget = half of a 32K context's keys, 4.3 GB
# a step at batch 8) and without it (--sparse-rerank 0: sketch scores and the selected pieces only).
for i in $(seq 1 40); do grep -q "build done\|done before" /root/peerout/setup.log && break; sleep 5; done
OUT_PEER=/root/peerout
[ -f /root/peerpack/ggml-vocab-qwen35.gguf ] || cp .gpu/peer/ggml-vocab-qwen35.gguf /root/peerpack/
(OUT=$OUT_PEER bash /root/peerpack/run.sh gen35 > $OUT_PEER/gen35.log 2>&1)
date -u +"%F %T UTC"
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs/hindsight
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
timeout 240 $B bench $C27 -p 512 -n 128 -d 0 -r 2 --batched 1:512 --batched 8:512 --batched 32:512 --batched 8:32768 \
  --batched-gen 128 --json $OUT/h27.json > $OUT/h27.log 2>&1; echo "hindsight rc $?"
grep "^| qwen\|peaks" $OUT/h27.log | cut -c1-220
for rr in auto 0; do
  timeout 120 $B bench $C27 -p 0 -n 0 -r 1 --batched 8:32768 --batched-gen 64 --sparse sketch --sketch random \
    --sparse-rerank $rr --json $OUT/h27s-$rr.json > $OUT/h27s-$rr.log 2>&1; echo "sparse rerank $rr rc $?"
  grep "^| qwen" $OUT/h27s-$rr.log | cut -d'|' -f9-16
done
date -u +"%F %T UTC"
OUT=$OUT timeout 240 bash /root/peerpack/run.sh bench35 batched35 2>&1 | grep -v "^$" | tail -16
date -u +"%F %T UTC"
