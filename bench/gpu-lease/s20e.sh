#!/bin/bash
# Session 20, call 5: where a step of 8 x 256K (int4 host tier, rank-16 sketches, tensor-core
# scoring) goes now: the eager per-op profile; and Q4_0 weights on the hit path.
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json -p 0 -n 0 -r 1 --sparse sketch --sketch random:16 --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 --batched 8:262144"
run() { local name=$1; shift; timeout ${T:-120} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|forced" $OUT/$name.log | cut -c1-260 | head -4; }
HS_CUDA_PROFILE=1 run prof --dummy-dtype bf16 --batched-gen 16
grep -E "^\| (attention|matmul|kv_write|add_rms|glu|rope)" $OUT/prof.log | head -24
run q40 --dummy-dtype q4_0 --batched-gen 64
