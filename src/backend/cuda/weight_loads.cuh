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

}  // namespace hs::cuda
