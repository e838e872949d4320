#!/bin/bash
# Session 22, after staging: cut the three models out of the staged pieces (sha256 checked), then
# scripts/gpu-check whole (ops, kernels, golden SmolLM2 / Gemma 3 / Qwen2.5-Coder-0.5B on CUDA,
# tiny hybrids, short benches, bad input), then s22c.sh (eval needle --device cuda). The haystacks
# and the 0.5B's sketch travel in .gpu/hay.
M=/root/stage/m; mkdir -p /root/res
bash bench/gpu-lease/cut-models.sh
cp .gpu/hay/*.safetensors $M/models/
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
HS_PREBUILT=/root/stage/hs HS_MODELS_DIR=$M/models timeout 400 scripts/gpu-check /root/res/check > /dev/null 2>&1; echo "gpu-check rc $?"
head -40 /root/res/check/summary.md
grep -E "FAILED|Failure" /root/res/check/*.log | head -20
bash bench/gpu-lease/s22c.sh
tar czf $OUT/s22b.tgz -C /root/res .
