// backend/cuda/glu.cuh — the gate arithmetic of glu (silu or gelu-tanh gate times up), one
// definition for glu_kernel and glu_q_kernel (elementwise.cu, the latter also writing the
// quantized GEMV's x records), so both give the same bits. The sigmoid is the CPU's
// overflow-free form (simd_math.h). Cost: one expf per element. (Making the product inside the
// down projection's GEMV instead was measured slower: docs/benchmarks.md, session 12.)
#pragma once

#include <cuda_runtime.h>

namespace hs::cuda {

// The CPU's sigmoid: e = exp(-|z|) never overflows.
__device__ __forceinline__ float sigmoid_f(float z) {
  const float e = expf(z < 0.0f ? z : -z);
  const float inv = 1.0f / (1.0f + e);
  return z >= 0.0f ? inv : e * inv;
}

// act(g) * u; kind 0: silu, 1: gelu (tanh form, written as g * sigmoid(2u)).
__device__ __forceinline__ float glu_value(int kind, float g, float u) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  float a;
  if (kind == 0) {
    a = __fmul_rn(g, sigmoid_f(g));
  } else {
    const float inner = __fadd_rn(g, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g));
    a = __fmul_rn(g, sigmoid_f(__fmul_rn(2.0f * kSqrt2OverPi, inner)));
  }
  return __fmul_rn(a, u);
}

}  // namespace hs::cuda
