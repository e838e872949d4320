#!/bin/bash
# Session 25: Nsight Compute on the rerank's exact_mass_kernel at 1 x 128K (8B shape, bf16 dummy,
# the bounds-first rerank): what bounds its ~44 us a layer (session 24's eager profile).
mkdir -p /root/stage && python3 -m tarfile -e .gpu/bundle/bins.txz /root/stage 2>/dev/null
export LD_LIBRARY_PATH=/root/stage/hs/lib:/usr/local/cuda/lib64
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
B=/root/stage/hs/hindsight
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 --sparse sketch --sketch random -p 0 -r 1 -n 2 -d 131072"
HS_CUDA_GRAPHS=0 timeout 200 $NCU --kernel-name regex:'exact_mass|rerank_rank|topk|score_kernel' --launch-skip 40 --launch-count 8 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  $B bench $C > $OUT/ncu.txt 2>&1; echo "ncu rc $?"
grep -E "exact_mass|rerank_rank|topk|score_k|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued" $OUT/ncu.txt | cut -c1-150 | head -90
