// backend/cpu/glu_kernel.h — the gated activations (silu(g)·u, gelu_tanh(g)·u) as one loop body
// for every ISA file (ops.cpp baseline, glu_avx2.cpp, glu_avx512.cpp), so each level runs the
// same float operations: the polynomial sigmoid of core/simd_math.h, no libm call, no FMA
// contraction (GCC would fuse a·b + c where FMA exists), hence the same bits at every level; the
// wider files only take more lanes per instruction (the FFN's [n][n_ff] is the largest
// elementwise op of a prefill). Internal linkage: one copy per ISA.
#pragma once

#include <cstdint>

#include "backend/cpu/simd_math.h"

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

namespace hs::cpu::detail {
namespace {

[[maybe_unused]] void silu_mul_impl(const float* gate, const float* up, int64_t n, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

// GELU with the tanh approximation: 0.5·g·(1 + tanh(u)) = g·sigmoid(2u),
// u = sqrt(2/π)·(g + 0.044715·g³).
[[maybe_unused]] void gelu_tanh_mul_impl(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g * sigmoid(2.0f * kSqrt2OverPi * (g + 0.044715f * g * g * g)) * up[i];
  }
}

}  // namespace
}  // namespace hs::cpu::detail

#pragma GCC pop_options
