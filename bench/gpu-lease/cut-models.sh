#!/bin/bash
# Cuts the three golden models (SmolLM2, Gemma 3 270M, Qwen2.5-Coder-0.5B) out of the pieces that
# s22p.sh staged into /root/stage/m (their concatenation, 38,000,000 bytes a piece) into
# /root/stage/m/models, and prints their sha256 (to compare with scripts/setup's).
M=/root/stage/m; mkdir -p $M/models
cat $M/all.?? | python3 -c "
import sys
f = sys.stdin.buffer
for name, n in [('smollm2-135m-instruct-q4_1', 98362432), ('gemma-3-270m-q4_k_m', 253113024),
                ('qwen2.5-coder-0.5b-instruct-q4_k_m', 491400064)]:
    open('$M/models/' + name + '.gguf', 'wb').write(f.read(n))
"
(cd $M/models && sha256sum *.gguf)
