#!/bin/bash
# Session 15: wait for the peer's build + gen35, then run bench35 and batched35 (GPU), copy tables.
for i in $(seq 1 50); do grep -q "gen35 done" /root/peerout/run1.log 2>/dev/null && break; sleep 10; done
tail -3 /root/peerout/run1.log
OUT=/root/peerout timeout 480 bash /root/peer/run.sh bench35 batched35 > /root/peerout/run2.log 2>&1
cp /root/peerout/*.md /root/peerout/*.txt /root/peerout/*.log $OUT/ 2>/dev/null; cat $OUT/bench35-q4_0.md $OUT/batched35*.txt 2>/dev/null
