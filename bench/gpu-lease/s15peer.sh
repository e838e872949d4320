#!/bin/bash
# Session 15: start llama.cpp's Qwen3.5-27B-shape stages in the background (carried .gpu/peer):
# build, gen35 (Q4_0 random weights in llama.cpp's qwen35 layout), bench35, batched35. They write
# /root/peerout; s15wait.sh collects them. The GPU is used only by bench35 / batched35, which
# start after hindsight's runs (s15h27.sh) when the build and generation take their ~7 min.
mkdir -p /root/peerout && cp -r .gpu/peer /root/peer
OUT=/root/peerout setsid nohup bash /root/peer/run.sh build gen35 > /root/peerout/run1.log 2>&1 < /dev/null &
echo started
