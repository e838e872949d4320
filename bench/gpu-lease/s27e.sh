#!/bin/bash
# Session 25: exact_mass_kernel with 16-byte q loads and the ranking inside the final top-k
# and int8 / int4 page elements widened by a byte permute instead of an int-to-float convert
# (all bit-exact: the sparse, host-tier and attention suites), A/B against
# the previous bundle at 1 x 96K / 128K, 8B shape, bf16 dummy (both bundles and the tree pass the
# 64 MiB carry: first `mkdir -p /root/st0 && python3 -m tarfile -e .gpu/bundle0/bins.txz /root/st0`
# carrying .gpu/bundle0, then this, carrying .gpu/bundle, on the warm machine);
# then s27f.sh.
mkdir -p /root/st && python3 -m tarfile -e .gpu/bundle/bins.txz /root/st 2>/dev/null
[ -x /root/st0/hs/hindsight ] || echo "no previous bundle in /root/st0: the A/B rows of bundle0 will fail"
export LD_LIBRARY_PATH=/root/st/hs/lib:/usr/local/cuda/lib64
timeout 300 /root/st/hs/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*:AttentionOps*:BackendOps.QkNorm*:BackendOps.RopeQk*:*HybridGolden*' \
  > $OUT/sparse.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/sparse.log | head
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 --sparse sketch --sketch random -p 0 -r 1 -n 32 -d 98304 131072"
for v in 0 "" 0 ""; do
  LD_LIBRARY_PATH=/root/st$v/hs/lib:/usr/local/cuda/lib64 timeout 60 /root/st$v/hs/hindsight bench $C > $OUT/b$v.log 2>&1
  echo "bundle$v rc $?"; grep "^| llama" $OUT/b$v.log | cut -d'|' -f9-12
done
# int4 / int8 pages, dense decode at 1 x 64K (the attention kernel's widening), old and new binaries
for v in 0 "" 0 ""; do
  for kvt in int4 int8; do
    LD_LIBRARY_PATH=/root/st$v/hs/lib:/usr/local/cuda/lib64 timeout 60 /root/st$v/hs/hindsight bench --device cuda \
      --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 -n 32 -d 65536 \
      --kv-cache-dtype $kvt > $OUT/kv$kvt$v.log 2>&1
    echo "bundle$v $kvt rc $?"; grep "^| llama" $OUT/kv$kvt$v.log | cut -d'|' -f9-12
  done
done
