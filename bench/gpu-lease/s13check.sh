#!/bin/bash
# Session 13: join the staged parts into the three models (sha256 checked), then scripts/gpu-check
# (op tests, golden SmolLM2 / Gemma 3 / Qwen2.5-Coder 0.5B on CUDA, short benches, bad input).
M=/root/stage/m; mkdir -p $M/models
cat $M/smol.?? > $M/models/smollm2-135m-instruct-q4_1.gguf
cat $M/gemma.?? > $M/models/gemma-3-270m-q4_k_m.gguf
cat $M/qwen.?? > $M/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
(cd $M/models && sha256sum *.gguf)
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
HS_PREBUILT=/root/stage/hs HS_MODELS_DIR=$M/models timeout 560 scripts/gpu-check $OUT/check > /dev/null 2>&1; echo "gpu-check rc $?"
cat $OUT/check/summary.md | head -60
