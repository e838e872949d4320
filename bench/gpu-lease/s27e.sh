#!/bin/bash
# Session 25: exact_mass_kernel with 16-byte q loads (bit-exact: the sparse suites), A/B against
# the previous bundle (carry .gpu/bundle and .gpu/bundle0) at 1 x 96K / 128K, 8B shape, bf16 dummy.
for v in 0 ""; do mkdir -p /root/st$v && python3 -m tarfile -e .gpu/bundle$v/bins.txz /root/st$v 2>/dev/null; done
export LD_LIBRARY_PATH=/root/st/hs/lib:/usr/local/cuda/lib64
timeout 100 /root/st/hs/hs_unit_tests --gtest_filter='SparseAttentionOps*' > $OUT/sparse.log 2>&1; echo "sparse rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  " $OUT/sparse.log | head
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 --sparse sketch --sketch random -p 0 -r 1 -n 32 -d 98304 131072"
for v in 0 "" 0 ""; do
  LD_LIBRARY_PATH=/root/st$v/hs/lib:/usr/local/cuda/lib64 timeout 60 /root/st$v/hs/hindsight bench $C > $OUT/b$v.log 2>&1
  echo "bundle$v rc $?"; grep "^| llama" $OUT/b$v.log | cut -d'|' -f9-12
done
