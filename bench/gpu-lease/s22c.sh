#!/bin/bash
# Session 22: issue 14 point 8, `eval needle --device cuda` on Qwen2.5-Coder-0.5B with the
# haystacks exported on the CPU machine (.gpu/hay, --corpus), 32 needles, budget 2048, the GPU's
# rules (page chunks, max rule; auto = the exact rerank 8x on the device tier; +norerank = the
# hierarchical shortlist, the rule until session 22); then waits for llama.cpp's setup.
M=/root/stage/m/models; mkdir -p /root/res
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
H=/root/stage/hs/hindsight
for h in include:c++ python:python docs:prose; do
  n=${h%%:*}; k=${h##*:}
  timeout 90 $H eval needle --device cuda -m $M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --corpus .gpu/hay/$n.txt \
    --needle-kind $k --context 16384 32768 --needles 32 --selectors sketch sketch+norerank --budgets 2048 --answer-tokens 16 \
    --json /root/res/needle-$n.json > /root/res/needle-$n.log 2>&1; echo "$n rc $?"
  grep "^| $n" /root/res/needle-$n.log | cut -d'|' -f2-10
done
for i in $(seq 1 12); do grep -q "quant done" /root/peerout/setup.log && break; sleep 5; done
cat /root/peerout/setup.log
