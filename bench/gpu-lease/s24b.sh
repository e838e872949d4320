#!/bin/bash
# Next lease (after s24a.sh unpacked the bundle): the exact rerank straight from the page bounds
# (--sparse-page-shortlist 1024 = 8 x the budget's 128 pages: SelectArgs::bounds_first) against
# the flat rerank (the default) and no rerank, 1 x 128K / 256K on the 8B shape, then the eager
# profile of each at 128K (the rerank's exact masses and ranking now timed apart).
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
B=/root/stage/hs
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 -p 0 -r 1 --sparse sketch --sketch random"
run() { local name=$1; shift; timeout ${T:-120} $B/hindsight bench $C "$@" --json $OUT/$name.json > $OUT/$name.log 2>&1; echo "$name rc $?"; grep -E "^\| llama|rror" $OUT/$name.log | cut -c1-230 | head -6; }
T=150 run flat -n 32 -d 131072 262144 --sparse-compare
T=80 run bounds -n 32 -d 131072 262144 --sparse-page-shortlist 1024
T=80 run rr0 -n 32 -d 131072 262144 --sparse-rerank 0
for r in flat:"" bounds:"--sparse-page-shortlist 1024"; do
  n=${r%%:*}; a=${r#*:}
  HS_CUDA_PROFILE=1 timeout 90 $B/hindsight bench $C -n 8 -d 131072 $a > $OUT/prof-$n.log 2>&1
  echo "profile $n rc $?"; grep -E "^cuda op profile|^\| attention" $OUT/prof-$n.log | cut -c1-160 | head -12
done
