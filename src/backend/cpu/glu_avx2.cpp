// backend/cpu/glu_avx2.cpp — glu_kernel.h compiled for AVX2 (8 lanes).
#include "backend/cpu/glu_kernel.h"

namespace hs::cpu::detail {
void silu_mul_avx2(const float* gate, const float* up, int64_t n, float* out) { silu_mul_impl(gate, up, n, out); }
void gelu_tanh_mul_avx2(const float* gate, const float* up, int64_t n, float* out) {
  gelu_tanh_mul_impl(gate, up, n, out);
}
}  // namespace hs::cpu::detail
