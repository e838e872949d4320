// backend/cuda/rope.cuh — the RoPE arithmetic of one rotated pair, shared by rope_kernel
// (elementwise.cu) and the fused RoPE + KV write (attention.cu), so both give the same bits.
// The angle is pos * theta^(-2i / head_dim) in double, as backend/cpu/ops.cpp's rope_table;
// the rotation is IEEE-rounded fp32 whatever the -fmad flags. Cost: one double pow and sincos
// per pair (shared by every head the thread rotates).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hs::cuda {

struct RopeCs {
  float cs, sn;
};

// cos / sin of pair ii of a head of head_dim at position pos.
__device__ __forceinline__ RopeCs rope_cs(int32_t pos, int ii, int head_dim, float theta) {
  const double a = pos * pow(static_cast<double>(theta), -2.0 * ii / head_dim);
  double sd, cd;
  sincos(a, &sd, &cd);
  return RopeCs{static_cast<float>(cd), static_cast<float>(sd)};
}

// The pair's element offsets in a head: neox rotates halves (ii, ii + d/2), else (2ii, 2ii + 1).
__device__ __forceinline__ int rope_off_a(int ii, int half, bool neox) { return neox ? ii : 2 * ii; }
__device__ __forceinline__ int rope_off_b(int ii, int half, bool neox) { return neox ? ii + half : 2 * ii + 1; }

// (va, vb) rotated by (cs, sn): a' = va cs - vb sn, b' = va sn + vb cs.
__device__ __forceinline__ float rope_a(float va, float vb, RopeCs r) {
  return __fsub_rn(__fmul_rn(va, r.cs), __fmul_rn(vb, r.sn));
}
__device__ __forceinline__ float rope_b(float va, float vb, RopeCs r) {
  return __fadd_rn(__fmul_rn(va, r.sn), __fmul_rn(vb, r.cs));
}

}  // namespace hs::cuda
