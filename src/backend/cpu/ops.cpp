// backend/cpu/ops.cpp — see ops.h. Math is float32 with float64 only where a sum over a
// whole row decides accuracy (RMSNorm sum of squares).
#include "backend/cpu/ops.h"

#include "backend/cpu/glu_kernel.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/simd_math.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hs::cpu {

void rms_norm(const float* x, const float* w, int n, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  if (w)
    for (int i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
  else
    for (int i = 0; i < n; ++i) out[i] = x[i] * inv;
}

void rope_table(int32_t pos, float theta, int head_dim, float* cs, float* sn) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double a = pos * std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    cs[i] = static_cast<float>(std::cos(a));
    sn[i] = static_cast<float>(std::sin(a));
  }
}

void rope_apply(float* x, int n_heads, int head_dim, const float* cs, const float* sn, bool neox) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* r = x + static_cast<int64_t>(h) * head_dim;
    if (neox) {
      for (int i = 0; i < half; ++i) {
        const float a = r[i], b = r[i + half];
        r[i] = a * cs[i] - b * sn[i];
        r[i + half] = a * sn[i] + b * cs[i];
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float a = r[2 * i], b = r[2 * i + 1];
        r[2 * i] = a * cs[i] - b * sn[i];
        r[2 * i + 1] = a * sn[i] + b * cs[i];
      }
    }
  }
}

void rope(float* x, int n_heads, int head_dim, int32_t pos, float theta, bool neox) {
  std::vector<float> cs(head_dim / 2), sn(head_dim / 2);
  rope_table(pos, theta, head_dim, cs.data(), sn.data());
  rope_apply(x, n_heads, head_dim, cs.data(), sn.data(), neox);
}

namespace detail {
void silu_mul_avx2(const float* gate, const float* up, int64_t n, float* out);
void silu_mul_avx512(const float* gate, const float* up, int64_t n, float* out);
void gelu_tanh_mul_avx2(const float* gate, const float* up, int64_t n, float* out);
void gelu_tanh_mul_avx512(const float* gate, const float* up, int64_t n, float* out);
}  // namespace detail

namespace {
using GluFn = void (*)(const float*, const float*, int64_t, float*);
// The level matmul uses (HS_SIMD honoured); every level gives the same bits (glu_kernel.h).
GluFn pick_glu(GluFn scalar, GluFn avx2, GluFn avx512) {
  switch (active_simd_level()) {
    case SimdLevel::kAvx512: return avx512;
    case SimdLevel::kAvx2: return avx2;
    default: return scalar;
  }
}
}  // namespace

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  static const GluFn fn = pick_glu(detail::silu_mul_impl, detail::silu_mul_avx2, detail::silu_mul_avx512);
  fn(gate, up, n, out);
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  static const GluFn fn =
      pick_glu(detail::gelu_tanh_mul_impl, detail::gelu_tanh_mul_avx2, detail::gelu_tanh_mul_avx512);
  fn(gate, up, n, out);
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void scale_inplace(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void softmax(float* x, int n) {
  float mx = -INFINITY;
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace hs::cpu
