#!/bin/bash
# Session 23, after staging (s22p.sh x 23): cut the three golden models out of the staged pieces
# (sha256 checked), run scripts/gpu-check whole (ops, kernels, golden SmolLM2 / Gemma 3 /
# Qwen2.5-Coder-0.5B on CUDA, tiny hybrids, short benches, bad input), then wait for llama.cpp's
# setup (started by s22a.sh) so the speed rows that follow run on an idle machine.
M=/root/stage/m; mkdir -p /root/res
bash bench/gpu-lease/cut-models.sh
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
HS_PREBUILT=/root/stage/hs HS_MODELS_DIR=$M/models timeout 420 scripts/gpu-check /root/res/check > /dev/null 2>&1; echo "gpu-check rc $?"
head -40 /root/res/check/summary.md
grep -E "FAILED|Failure" /root/res/check/*.log | head -20
for i in $(seq 1 24); do grep -q "quant done" /root/peerout/setup.log && break; sleep 5; done
tail -4 /root/peerout/setup.log
tar czf $OUT/s23b.tgz -C /root/res .
