#!/bin/bash
# Session 27: where a decode step of the Qwen3.5-27B shape (Q4_0 dummy weights) spends its time,
# kernel by kernel, as Nsight Compute measures each alone (graphs off, so every node is a plain
# launch): duration and DRAM bytes of every kernel of two steps, summed by kernel name, for
# batch 1 (tg) and for 8 x 32K dense. Needs the binaries in /root/st (s30a.sh).
export LD_LIBRARY_PATH=/root/st/hs/lib:/usr/local/cuda/lib64
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
B=/root/st/hs/hindsight
C27="--device cuda --load-format dummy --config configs/qwen3.5-27b.json --dummy-dtype q4_0 -r 1"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
prof() {  # name, kernels to skip, kernels to profile, bench args
  local name=$1 skip=$2 count=$3; shift 3
  HS_CUDA_GRAPHS=0 timeout 240 $NCU --metrics $M --csv --print-units base --launch-skip $skip --launch-count $count \
    $B bench $C27 "$@" > $OUT/ncu-$name.csv 2> $OUT/ncu-$name.err; echo "ncu $name rc $?"
  python3 - $OUT/ncu-$name.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
rows = rows[next(i for i, r in enumerate(rows) if "Kernel Name" in r):]
hdr = rows[0]; ki = hdr.index("Kernel Name"); mi = hdr.index("Metric Name"); vi = hdr.index("Metric Value"); ii = hdr.index("ID")
agg = collections.defaultdict(lambda: [0, 0.0, 0.0, set()])
for r in rows[1:]:
    name = r[ki].replace("(anonymous namespace)", "").replace("void ", "")
    name = name.split("(")[0].split("<")[0].split("::")[-1]
    v = float(r[vi].replace(",", ""))
    a = agg[name]; a[3].add(r[ii])
    if r[mi] == "gpu__time_duration.sum": a[1] += v
    else: a[2] += v
tot = sum(a[1] for a in agg.values())
print(f"{'kernel':40s} {'calls':>6s} {'us':>10s} {'%':>6s} {'MB':>10s} {'GB/s':>8s}")
for n, a in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{n[:40]:40s} {len(a[3]):6d} {a[1]/1e3:10.1f} {100*a[1]/tot:6.1f} {a[2]/1e6:10.1f} {a[2]/max(a[1],1):8.1f}")
print(f"total {tot/1e3:.1f} us over {sum(len(a[3]) for a in agg.values())} kernels")
PY
}
# 1,000 kernels (about one step) from kernel 12,000 on: past the dummy load, the peaks and the
# prompt (< 5,000 kernels), inside the 40 decode steps (~900 kernels each).
prof tg1 12000 1000 -p 16 -n 40 -d 0
prof b8x32k 12000 1000 -p 0 -n 0 --batched 8:32768 --batched-gen 40 --sparse-min-context 1000000
# One launch each of the batch-8 quantized GEMM (barrier-free variant) and the batch-1 GEMV in
# detail: speed of light, occupancy, warp stalls (the 17408 x 5120 gate/up pair is the largest).
detail() {  # name, kernel regex, bench args
  local name=$1 re=$2; shift 2
  HS_CUDA_GRAPHS=0 timeout 200 $NCU --kernel-name regex:$re --launch-skip 200 --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats $B bench $C27 "$@" > $OUT/ncu-$name.txt 2>&1; echo "ncu $name rc $?"
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Size|Grid Size|Stall|Warp Cycles Per Issued|Compute \(SM\)" \
    $OUT/ncu-$name.txt | cut -c1-150 | head -40
}
detail gemm8 gemm_quant -p 0 -n 0 --batched 8:512 --batched-gen 40
detail gemv1 gemv_quant_warp_kernel -p 16 -n 40 -d 0
# If Nsight Systems is on the machine: the replayed graph's kernels as they overlap (PDL), per kernel
# name (total time, instances), batch 1.
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys 2>/dev/null || ls /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  timeout 200 $NSYS profile --cuda-graph-trace=node -t cuda -o /tmp/tg1 --force-overwrite true \
    $B bench $C27 -p 16 -n 64 -d 0 > $OUT/nsys-tg1.log 2>&1; echo "nsys rc $?"
  $NSYS stats --report cuda_gpu_kern_sum --format csv /tmp/tg1.nsys-rep > $OUT/nsys-tg1-kern.csv 2>/dev/null
  head -25 $OUT/nsys-tg1-kern.csv | cut -c1-200
else
  echo "no nsys on this machine"
fi
