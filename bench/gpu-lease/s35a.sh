#!/bin/bash
# Next lease (session 29+), a fresh machine with .gpu/bundle carried: session 28's unmeasured
# batch-1 GEMV variants. Suites with them on (the stream-K test forces its plan; the others take
# the env), then one process a tg128 row of the 27B shape (Q4_0 dummy weights), alternating:
#   stream-K over the resident warps (HS_CUDA_QW_STREAM=1), L2 prefetch while waiting for x
#   (HS_CUDA_QW_PREFETCH=24 MiB), the pipelined loop at 4 CTAs an SM (HS_CUDA_QW_CTAS=4);
# then the 8-row GEMM's prefetch (HS_CUDA_GEMMQ_PREFETCH=32) and 2-CTA variant (HS_CUDA_GEMMQ_WARP2=1)
# at 8 x 32K.
mkdir -p /root/st && python3 -m tarfile -e .gpu/bundle/bins.txz /root/st 2>/dev/null
B=/root/st/hs
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64
date -u +"%F %T UTC"
HS_CUDA_QW_STREAM=1 HS_CUDA_QW_PREFETCH=16 HS_CUDA_GEMMQ_PREFETCH=16 HS_CUDA_GEMMQ_WARP2=1 timeout 200 $B/hs_unit_tests \
  --gtest_filter='QuantWarpGemv.*:QuantGemv.*:BackendOps.*Matmul*:BackendOps.Early*:HybridOps.*' > $OUT/tests.log 2>&1
echo "suites rc $?"; grep -E "^\[  (PASSED|FAILED)|FAILED  |Failure" $OUT/tests.log | head -12
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0"
# stream : prefetch MiB : CTAs an SM
for v in 0:0:3 1:0:3 0:24:3 0:0:4 0:0:3 1:0:3 0:24:3 0:0:4; do
  IFS=: read st pf ct <<< "$v"
  HS_CUDA_QW_STREAM=$st HS_CUDA_QW_PREFETCH=$pf HS_CUDA_QW_CTAS=$ct timeout 100 $B/hindsight bench $C27 -p 16 -n 128 \
    -d 0 -r 2 > $OUT/tg-$st-$pf-$ct.log 2>&1
  echo "27B tg128 stream:prefetch:ctas=$v rc $?"; grep "^| qwen" $OUT/tg-$st-$pf-$ct.log | grep tg128 | cut -d"|" -f9-14
done
# prefetch MiB : the 8-row GEMM's 2-CTA variant (HS_CUDA_GEMMQ_WARP2=1: 126 registers, 16 warps an SM)
for v in 0:0 32:0 0:1 0:0 0:1; do
  IFS=: read pf w2 <<< "$v"
  HS_CUDA_GEMMQ_PREFETCH=$pf HS_CUDA_GEMMQ_WARP2=$w2 timeout 100 $B/hindsight bench $C27 -p 0 -n 0 -r 1 \
    --batched 8:32768 --batched-gen 32 --kv-cache-dtype int8 > $OUT/b8-$pf-$w2.log 2>&1
  echo "27B 8x32K int8 prefetch:warp2=$v rc $?"; grep "^| qwen" $OUT/b8-$pf-$w2.log | cut -d"|" -f9-14
done
# Nsight Compute's detail of the 8-row GEMM's barrier-free kernel at 8 x 512 (s30p.sh's regex
# caught the prefill kernel) and of the stream-K GEMV at batch 1.
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for d in "gemm8w gemm_quant_warp_kernel -p 0 -n 0 --batched 8:512 --batched-gen 40" \
         "gemv1s gemv_quant_stream_kernel -p 16 -n 40 -d 0"; do
  set -- $d; name=$1; re=$2; shift 2
  HS_CUDA_QW_STREAM=1 HS_CUDA_GRAPHS=0 timeout 150 $NCU --kernel-name regex:$re --launch-skip 200 --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats $B/hindsight bench $C27 -r 1 "$@" > $OUT/ncu-$name.txt 2>&1; echo "ncu $name rc $?"
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Warp Cycles Per Issued" \
    $OUT/ncu-$name.txt | cut -c1-150 | head -24
done
date -u +"%F %T UTC"
