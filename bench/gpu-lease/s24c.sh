#!/bin/bash
# Next lease, after the models are staged and cut (s23b.sh; carry .gpu/hay): the rerank straight
# from the page bounds on real text, `eval needle --device cuda` on Qwen2.5-Coder-0.5B at 32K on the
# haystacks exported in session 22: the default (flat rerank 8x) against +pages1024 (the bounds'
# best 1,024 pages reranked as they are). The CPU emulation gave equal answers (docs/benchmarks.md,
# session 23): docs 21 / 21, include 15 / 15, python 14 / 14.
M=/root/stage/m/models
cp .gpu/hay/*.safetensors $M/ 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs/hindsight
for h in docs:prose include:c++ python:python; do
  n=${h%%:*}; k=${h##*:}
  timeout 150 $H eval needle --device cuda -m $M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --corpus .gpu/hay/$n.txt \
    --needle-kind $k --context 32768 --needles 32 --selectors sketch sketch+pages1024 --budgets 2048 --answer-tokens 16 \
    --json $OUT/needle-$n.json > $OUT/needle-$n.log 2>&1; echo "$n rc $?"
  grep "^| $n" $OUT/needle-$n.log | cut -d'|' -f2-10
done
