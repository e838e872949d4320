#!/bin/bash
# Session 15, call 2: the last SmolLM2 part (.gpu/p01), then scripts/gpu-check on the carried
# binaries: every CUDA op against the CPU op (now with HybridOps: conv1d, delta rule, gates, norms,
# partial RoPE, MoE), golden on CUDA (SmolLM2; tiny qwen35 / qwen3next from both loaders, batched
# = alone, graph = eager; Gemma 3 / Qwen2.5-Coder are not staged: their cases skip), short benches.
M=/root/stage/m; mkdir -p $M/models
cp .gpu/p*/* $M/ 2>/dev/null
cat $M/smol.?? > $M/models/smollm2-135m-instruct-q4_1.gguf
(cd $M/models && sha256sum *.gguf)
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
HS_PREBUILT=/root/stage/hs HS_MODELS_DIR=$M/models timeout 540 scripts/gpu-check $OUT/check > /dev/null 2>&1; echo "gpu-check rc $?"
cat $OUT/check/summary.md | head -60
grep -h "hybrid golden\|FAILED\|Failure\|error" $OUT/check/golden.log | head -40
grep -h "FAILED\|Failure" $OUT/check/ops.log | head -20
