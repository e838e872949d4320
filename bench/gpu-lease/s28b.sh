#!/bin/bash
# Where the sparse top-k's ~30K cycles a row go (s27d.sh: 21.3 us for the bounds' shortlist of
# ~8K pages, 11.7 us for the final pick of 1K, one CTA of 1024 threads a row, SM issue ~1.8 IPC):
# Nsight Compute's instruction mix and source-level stall sampling of topk_kernel at 1 x 128K
# (8B shape, bf16 dummy, graphs off). Needs the binaries unpacked in /root/st (s27e.sh).
export LD_LIBRARY_PATH=/root/st/hs/lib:/usr/local/cuda/lib64
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
C="--device cuda --load-format dummy --config configs/llama-3.1-8b.json --dummy-dtype bf16 --sparse sketch --sketch random -p 0 -r 1 -n 2 -d 131072"
HS_CUDA_GRAPHS=0 timeout 300 $NCU --kernel-name regex:topk --launch-skip 40 --launch-count 2 \
  --section InstructionStats --section WarpStateStats --section SourceCounters --section SchedulerStats \
  /root/st/hs/hindsight bench $C > $OUT/ncu-topk.txt 2>&1; echo "ncu rc $?"
grep -E "topk_kernel|Executed Instructions|Issued Instructions|Stall|stall|Warp Cycles|Eligible|Branch|Source|Sampling" $OUT/ncu-topk.txt | cut -c1-160 | head -60
