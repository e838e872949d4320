#!/bin/bash
# The peer's timings (foreground, machine otherwise idle).
date -u +"%F %T UTC"
bash /root/peerpack/run.sh bench1 batched bench2 2>&1 | grep -v "^\[" | tail -60
W=/tmp/peer; $W/build/bin/llama-bench -m $W/f16.gguf -ngl 99 -fa 1 -p 0 -n 64 -d 131072 -ctk q8_0 -ctv q8_0 -r 1 -o md 2>&1 | tee $OUT/bench-f16-depth-q8kv.md | tail -3
cp /tmp/peer/out/*.md /tmp/peer/out/*.txt $OUT/ 2>/dev/null; ls $OUT
