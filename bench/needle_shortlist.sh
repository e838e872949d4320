#!/bin/bash
# Recall of the GPU's hierarchical scoring (--sparse-page-shortlist N) against the flat max rule,
# measured on the CPU through its host emulation (same bounds): Qwen2.5-Coder-0.5B, one code or prose
# haystack, 32 needles, budget 2048, GPU-like rules (16-token chunks, max chunk score, no rerank).
# usage: [HAYSTACK=python|docs|include] bench/needle_shortlist.sh CONTEXT [N...]   (writes /tmp/needle_sl_H_CONTEXT_N.json)
set -eu
cd "$(dirname "$0")/.."
ctx=${1:?context}; shift
M=models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
for n in 0 "$@"; do
  build/bin/hindsight eval needle -m $M --haystack ${HAYSTACK:-python} --context $ctx --needles 32 --selectors sketch --budgets 2048 \
    --answer-tokens 16 -t 2 --sparse-chunk 16 --sparse-rerank 0 --sparse-chunk-score max --sparse-page-shortlist $n \
    --json /tmp/needle_sl_${HAYSTACK:-python}_${ctx}_$n.json 2>&1 | grep -vE '^\[' | tail -6
done
