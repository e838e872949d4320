// backend/cpu/matmul_exact_avx512.cpp — matmul_exact_kernel.h compiled for AVX512.
#include "backend/cpu/matmul_exact_kernel.h"

namespace hs::cpu::detail {
void exact_tile_avx512(const WeightView& w, int64_t row_bytes, const float* x, int64_t r0, int64_t r1, int64_t t0,
                     int64_t t1, float* y, float* buf) {
  exact_tile(w, row_bytes, x, r0, r1, t0, t1, y, buf);
}
void dequant_avx512(DType type, const uint8_t* src, int64_t n, float* y) { dequant(type, src, n, y); }
void fused_tile_avx512(const WeightView& w, int64_t row_bytes, const float* x, const float* xs16, int64_t r0,
                     int64_t r1, int64_t t0, int64_t t1, float* y) {
  fused_tile(w, row_bytes, x, xs16, r0, r1, t0, t1, y);
}
void sums16_avx512(const float* x, int64_t n, float* xs16) { sums16(x, n, xs16); }
}  // namespace hs::cpu::detail
