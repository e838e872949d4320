#!/bin/bash
# Session 27: the lease's first call, carrying .gpu/bundle (bundle of 8ccbc70) and .gpu/peer
# without its qwen35 vocabulary: unpacks the binaries to /root/st (and /root/stage) and starts
# llama.cpp's build, its F16 and Q4_0 8B weights in the background (as s29a.sh, without its
# test suites and A/B rows: gpu-check whole, s29b.sh after s29p.sh x 15, runs every suite).
mkdir -p /root/st && python3 -m tarfile -e .gpu/bundle/bins.txz /root/st 2>/dev/null
[ -e /root/stage ] || ln -s /root/st /root/stage
if [ -f .gpu/peer/run.sh ] && [ ! -d /root/peerpack ]; then
  cp -r .gpu/peer /root/peerpack && mkdir -p /root/peerout
  (OUT=/root/peerout setsid nohup nice -n 19 bash /root/peerpack/run.sh build gen quant > /root/peerout/setup.log 2>&1 < /dev/null &)
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
date -u +"%F %T UTC"; ls /root/st/hs
