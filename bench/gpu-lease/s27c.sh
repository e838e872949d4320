#!/bin/bash
# Session 25, last call (carry .gpu/bundle): where sparse decode with the exact rerank starts to
# beat dense on the GPU (the auto --sparse-min-context is now 4 x R x budget = 64K there). The 8B
# shape, bf16 dummy weights, synthetic KV on the device, budget 2048: the reranked sparse step
# (forced on with --sparse-min-context 0) against dense, batch 1 at 32K..96K, then 8 x 32K.
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs/hindsight
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 --sparse sketch --sketch random"
date -u +"%F %T UTC"
timeout 150 $B bench $C -p 0 -r 1 -n 32 -d 32768 49152 65536 98304 --sparse-min-context 0 --sparse-compare \
  > $OUT/x1.log 2>&1; echo "batch 1 rc $?"; grep "^| llama" $OUT/x1.log | cut -d'|' -f9-12
timeout 60 $B bench $C -p 0 -r 1 -n 32 -d 32768 > $OUT/x1auto.log 2>&1; echo "auto rc $?"; grep "^| llama" $OUT/x1auto.log | cut -d'|' -f9-12
for mc in 0 1000000; do
  timeout 90 $B bench $C -p 0 -n 0 -r 1 --batched 8:32768 --batched-gen 32 --sparse-min-context $mc > $OUT/x8-$mc.log 2>&1
  echo "8x32K min-context $mc rc $?"; grep "^| llama" $OUT/x8-$mc.log | cut -d'|' -f9-12
done
date -u +"%F %T UTC"
