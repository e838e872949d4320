#!/bin/bash
# Session 26, after s29a.sh (binaries in /root/st) and staging (s22p.sh x 23): cut the three golden models out of the
# staged pieces (sha256 printed) and run scripts/gpu-check whole (ops, kernels, golden SmolLM2 /
# Gemma 3 / Qwen2.5-Coder-0.5B and the tiny hybrids on CUDA, short benches, bad input); as
# s23b.sh without waiting for llama.cpp (not built this lease).
M=/root/stage/m; mkdir -p /root/res
bash bench/gpu-lease/cut-models.sh
export LD_LIBRARY_PATH=/root/st/hs/lib:/usr/local/cuda/lib64
HS_PREBUILT=/root/st/hs HS_MODELS_DIR=$M/models timeout 420 scripts/gpu-check /root/res/check > /dev/null 2>&1; echo "gpu-check rc $?"
head -40 /root/res/check/summary.md
grep -E "FAILED|Failure" /root/res/check/*.log | head -20
tar czf $OUT/s27b.tgz -C /root/res .
