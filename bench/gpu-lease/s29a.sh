#!/bin/bash
# Session 26: s27e.sh's checks plus the shortlist's top-k on a cluster of CTAs a row
# (shortlist_kernel; SparseAttentionOps.ALongRowShortlistsAcrossAClusterAsTheCpu). Carry
# .gpu/bundle, after `mkdir -p /root/st0 && python3 -m tarfile -e .gpu/bundle0/bins.txz /root/st0`
# (carrying .gpu/bundle0: the 18:57 binaries, before session 25's last four changes and this one)
# on the warm machine. A/B at 1 x 128K / 256K (8B shape, bf16 dummy, the default bounds-first
# rerank): bundle0 (the old 1024-thread one-CTA shortlist), this bundle, and this bundle with
# the new kernel on one CTA of 256 threads a row (HS_CUDA_TOPK_CLUSTER=1: what the cluster adds).
mkdir -p /root/st && python3 -m tarfile -e .gpu/bundle/bins.txz /root/st 2>/dev/null
[ -e /root/stage ] || ln -s /root/st /root/stage  # the older scripts' (s22p.sh, s23f.sh, s26q.sh) path
# With the peer pack carried too (.gpu/peer without its qwen35 vocabulary: the three fit 64 MiB),
# llama.cpp's build, F16 8B and Q4_0 8B start in the background, niced (as s22a.sh).
if [ -f .gpu/peer/run.sh ] && [ ! -d /root/peerpack ]; then
  cp -r .gpu/peer /root/peerpack && mkdir -p /root/peerout
  (OUT=/root/peerout setsid nohup nice -n 19 bash /root/peerpack/run.sh build gen quant > /root/peerout/setup.log 2>&1 < /dev/null &)
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
[ -x /root/st0/hs/hindsight ] || echo "no previous bundle in /root/st0: the A/B rows of bundle0 will fail"
export LD_LIBRARY_PATH=/root/st/hs/lib:/usr/local/cuda/lib64
timeout 300 /root/st/hs/hs_unit_tests --gtest_filter='SparseAttentionOps*:HostTierOps*:AttentionOps*:BackendOps.QkNorm*:BackendOps.RopeQk*:*HybridGolden*' \
  > $OUT/sparse.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  |exact rerank" $OUT/sparse.log | head -20
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 --sparse sketch --sketch random -p 0 -r 1 -n 32 -d 131072 262144"
round=0
for v in 0 "" c1 0 ""; do
  round=$((round + 1)); b=${v%c1}; env=""; [ "$v" = c1 ] && env="HS_CUDA_TOPK_CLUSTER=1"
  env $env LD_LIBRARY_PATH=/root/st$b/hs/lib:/usr/local/cuda/lib64 timeout 80 /root/st$b/hs/hindsight bench $C > $OUT/b$v$round.log 2>&1
  echo "bundle$v rc $?"; grep "^| llama" $OUT/b$v$round.log | cut -d'|' -f9-12
done
# int4 / int8 pages, dense decode at 1 x 64K (the attention kernel's widening), old and new binaries
for v in 0 ""; do
  for kvt in int4 int8; do
    LD_LIBRARY_PATH=/root/st$v/hs/lib:/usr/local/cuda/lib64 timeout 60 /root/st$v/hs/hindsight bench --device cuda \
      --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 -n 32 -d 65536 \
      --kv-cache-dtype $kvt > $OUT/kv$kvt$v.log 2>&1
    echo "bundle$v $kvt rc $?"; grep "^| llama" $OUT/kv$kvt$v.log | cut -d'|' -f9-12
  done
done
