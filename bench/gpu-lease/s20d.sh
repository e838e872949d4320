#!/bin/bash
# Session 20, call 4: the sketch score kernel on tensor cores (mma.sync, q̂ split hi + lo) and the
# shared mma.cuh (GEMV, GEMM, flash prefill now call it). The op and kernel suites of
# scripts/gpu-check, then the sparse rows: 1 x 128K / 256K device-resident sparse (before: 153.2
# / 128.95), 8 x 256K int4 host tier rank 16 (before: 447.0 hit path, 372.2 at 0.282 misses).
mkdir -p /root/stage && tar xzf .gpu/bundle/bins.tgz -C /root/stage
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
timeout 240 $B/hs_unit_tests --gtest_filter='BackendOps*:AttentionOps*:SparseAttentionOps*:HostTierOps*:HybridOps*:QuantGemv*:QuantWarpGemv*:GemvWarp*:Gemm16Mma*:FlashPrefill*:DecodeAttention*:Bias*:QuantLayout*:RmsNormKernel*:*GraphTest*' > $OUT/ops.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |sparse select" $OUT/ops.log | head -20
grep -B2 -A8 "Failure" $OUT/ops.log | head -30
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 --sparse sketch"
run() { local name=$1; shift; timeout ${T:-150} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|forced|device sparse" $OUT/$name.log | cut -c1-260 | head -6; }
T=150 run dev -n 64 -d 131072 262144 --sketch random
H="-n 0 --sketch random:16 --kv-cache-dtype int4 --kv-tier host --device-kv-budget 4294967296 --batched 8:262144 --batched-gen 64"
T=120 run b8 $H
HS_CUDA_HOT_FORCE_MISS=0.282 T=120 run b8_m282 $H
HS_CUDA_PROFILE=1 T=120 run b8_prof $H --batched-gen 16
grep -E "sparse score|attention \(n=8\)|hot fetch|top-k|kernel \(sparse" $OUT/b8_prof.log | head
