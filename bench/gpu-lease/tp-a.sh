#!/bin/bash
# Tensor parallelism on a multi-GPU kind (issue 18; docs/tensor-parallel.md), one call after the
# bundle is carried (.gpu/bundle from `make cuda && scripts/gpu-bundle .gpu/bundle`). Needs a kind of
# 2+ GPUs (nvidia-h100-x2 / -x4 / h200-x2 ...); NCCL comes from PyTorch's nvidia-nccl wheel there.
#  1. correctness: the 8B dummy shape's greedy tokens at TP = 1 / 2 / 4 (as many as the GPUs allow),
#     and the TP tests (golden models only where staged under HS_MODELS_DIR);
#  2. speed: batch-1 decode (tg128) and 64-sequence aggregate decode, bf16 weights, per TP, one run;
#     the Qwen3.5-27B hybrid shape (Q4_0; Gated-DeltaNet layers split by key head) at batch 1 and 8.
set -u
mkdir -p /root/stage && python3 -m tarfile -e ${HS_BUNDLE:-.gpu/bundle}/bins.txz /root/stage
B=/root/stage/hs
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
export NCCL_NVLS_ENABLE=0
HS_NCCL_LIB=$(python3 -c "import nvidia.nccl as n, os; print(os.path.join(list(n.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
export HS_NCCL_LIB
NGPU=$(nvidia-smi -L | wc -l)
echo "GPUs: $NGPU; NCCL: ${HS_NCCL_LIB:-not found}" | tee $OUT/summary.txt
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >> $OUT/summary.txt
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16"
timeout 200 $B/hs_unit_tests --gtest_filter='*TensorParallel*' > $OUT/tests.log 2>&1
echo "tests rc $?" >> $OUT/summary.txt; grep -E "^\[tp\]|FAILED|PASSED" $OUT/tests.log >> $OUT/summary.txt
for tp in 1 2 4 8; do
  [ $tp -le $NGPU ] || continue
  timeout 120 $B/hindsight generate $C --tp $tp -p "hello" -n 32 --temp 0 --ignore-eos > $OUT/gen-tp$tp.txt 2> $OUT/gen-tp$tp.log
  echo "generate tp $tp rc $? $(md5sum < $OUT/gen-tp$tp.txt)" >> $OUT/summary.txt
done
for tp in 1 2 4 8; do
  [ $tp -le $NGPU ] || continue
  timeout 150 $B/hindsight bench $C --tp $tp -p 512 -n 128 -d 0 -r 3 --json $OUT/b1-tp$tp.json > $OUT/b1-tp$tp.log 2>&1
  echo "bench b1 tp $tp rc $?" >> $OUT/summary.txt; grep -E "^\| llama" $OUT/b1-tp$tp.log >> $OUT/summary.txt
  timeout 150 $B/hindsight bench $C --tp $tp -p 0 -n 0 -r 1 --batched 64:512 --batched-gen 128 \
    --json $OUT/b64-tp$tp.json > $OUT/b64-tp$tp.log 2>&1
  echo "bench b64 tp $tp rc $?" >> $OUT/summary.txt; grep -E "^\| llama" $OUT/b64-tp$tp.log >> $OUT/summary.txt
done
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
for tp in 1 2 4; do
  [ $tp -le $NGPU ] || continue
  timeout 200 $B/hindsight bench $C27 --tp $tp -p 512 -n 128 -d 0 -r 2 --batched 8:512 --batched-gen 64 \
    --json $OUT/q27-tp$tp.json > $OUT/q27-tp$tp.log 2>&1
  echo "bench 27B tp $tp rc $?" >> $OUT/summary.txt; grep -E "^\| qwen" $OUT/q27-tp$tp.log >> $OUT/summary.txt
done
cat $OUT/summary.txt
