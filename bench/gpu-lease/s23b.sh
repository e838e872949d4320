#!/bin/bash
# Session 23, after staging (s22p.sh x 23): scripts/gpu-check whole through s27b.sh (the three
# golden models cut out of the staged pieces, sha256 printed), then wait for llama.cpp's setup
# (started by s22a.sh) so the speed rows that follow run on an idle machine.
bash bench/gpu-lease/s27b.sh
for i in $(seq 1 24); do grep -q "quant done" /root/peerout/setup.log && break; sleep 5; done
tail -4 /root/peerout/setup.log
