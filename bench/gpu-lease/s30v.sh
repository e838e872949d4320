#!/bin/bash
# Session 27, right after s30a.sh: the tensor-core decode attention on the GPU for the first time.
# Its suites with it on (AttentionOps.TensorCoreDecodeKernelAsTheCpu: f16 / int8 / fp8, G 1-8,
# head_dim 64-256; the fp8 / int8 suites, DecodeAttention's 1e-4 bounds with NaN in unowned
# slots, the sparse and host-tier suites: hot-slot rows), then its A/B (s30n.sh).
B=${B:-/root/st/hs}
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
date -u +"%F %T UTC"
HS_CUDA_ATTN_MMA=1 timeout 240 $B/hs_unit_tests \
  --gtest_filter='AttentionOps.TensorCore*:AttentionOps.Fp8*:AttentionOps.Int8*:DecodeAttention.MatchesHostReference:SparseAttentionOps*:HostTierOps*' \
  > $OUT/mma-tests.log 2>&1; echo "mma tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |Failure|attention.*max" $OUT/mma-tests.log | head -24
bash bench/gpu-lease/s30n.sh
