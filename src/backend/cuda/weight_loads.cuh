// backend/cuda/weight_loads.cuh — the streaming weight loads the GEMV kernels share (gemv.cu,
// gemv_quant_warp.cu): 16 / 8 / 4 bytes through the read-only path, no L1 allocation (every
// weight byte is read once per call), 256-byte L2 fetch. Device code only (nvcc).
#pragma once

#include <cstdint>

namespace hs::cuda {

__device__ __forceinline__ uint4 ld_w16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_w8(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_w4(const uint8_t* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// Asks L2 to fetch [p, p + bytes) (p 16-byte aligned, bytes a multiple of 16): one instruction,
// no registers, nothing waited for. A kernel launched early (programmatic dependent) uses it for
// weights it will read once its input is ready. A no-op below sm_90.
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

// The first n groups (quant_prefetch_groups) of a Q4_0 / Q8_0 device row asked of L2: their 64 n
// quant bytes and their scales (scale_bytes a group: 8 / 4) from scale_offset.
__device__ __forceinline__ void prefetch_row_groups(const uint8_t* row, int64_t scale_offset, int n, int scale_bytes) {
  prefetch_l2_bulk(row, static_cast<uint32_t>(64 * n));
  prefetch_l2_bulk(row + scale_offset, static_cast<uint32_t>((scale_bytes * n + 15) / 16 * 16));
}

}  // namespace hs::cuda
