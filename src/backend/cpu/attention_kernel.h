// backend/cpu/attention_kernel.h — the attention inner loop, written once and compiled per
// ISA (attention.cpp baseline, attention_avx2.cpp, attention_avx512.cpp) so `omp simd`
// loops vectorize with that ISA's registers. Included only by those files.
#pragma once

#include <cmath>

#include "backend/cpu/attention.h"

namespace hs::cpu::detail {
// Internal linkage: each ISA's file gets its own copy (an inline function shared across
// files compiled with different -m flags could be linked to the wrong ISA's body). For the
// same reason the kernel calls no inline library templates (std::max, std::fill).
namespace {

// exp(x) for x <= 0 (softmax arguments), vectorizable: 2^n · p(r) with r = x - n·ln2,
// |r| <= ln2/2, degree-6 polynomial; relative error < 2e-7 (about 2 ulp). Inputs below
// -87 flush to 0.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  // Round to nearest by the 1.5·2^23 trick (vectorizes; exact for |x·log2e| < 2^22).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // Cody-Waite ln2 split
  float p = 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { float f; int32_t i; } scale;
  scale.i = (static_cast<int32_t>(n) + 127) << 23;
  return p * scale.f;
}

constexpr int kMaxGroup = 16;   // query heads per kv head handled in one pass
constexpr int kMaxPage = 64;    // page_tokens upper bound (scores scratch per page)

void attention_partial_impl(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin,
                                   int32_t end, float scale, AttnPartial part) {
  const int P = kv.page_tokens, hd = kv.head_dim;
  for (int g = 0; g < n_q; ++g) {
    part.max[g] = -INFINITY;
    part.sum[g] = 0.0f;
    for (int d = 0; d < hd; ++d) part.acc[g * hd + d] = 0.0f;
  }
  float s[kMaxGroup][kMaxPage];  // scores of the current page run
  for (int32_t pos = begin; pos < end;) {
    const int32_t page_end = (pos / P + 1) * P;
    const int32_t run_end = end < page_end ? end : page_end;
    const int n = run_end - pos;
    const float* rows = kv.layer_base + static_cast<int64_t>(kv.blocks[pos / P]) * kv.page_floats +
                        (static_cast<int64_t>(kv_head) * P + pos % P) * 2 * hd;
    // Scores for the run: s[g][j] = scale * q_g · k_j.
    for (int j = 0; j < n; ++j) {
      const float* k = rows + static_cast<int64_t>(j) * 2 * hd;
      for (int g = 0; g < n_q; ++g) {
        const float* qg = q + g * hd;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < hd; ++d) dot += qg[d] * k[d];
        s[g][j] = dot * scale;
      }
    }
    // Online softmax update: rescale once per run, then accumulate V.
    for (int g = 0; g < n_q; ++g) {
      float run_max = part.max[g];
      for (int j = 0; j < n; ++j) run_max = s[g][j] > run_max ? s[g][j] : run_max;
      const float correction = part.max[g] == -INFINITY ? 0.0f : exp_nonpositive(part.max[g] - run_max);
      float* acc = part.acc + g * hd;
      if (correction != 1.0f) {
#pragma omp simd
        for (int d = 0; d < hd; ++d) acc[d] *= correction;
      }
      float sum = part.sum[g] * correction;
      float* sg = s[g];
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < n; ++j) {
        sg[j] = exp_nonpositive(sg[j] - run_max);
        sum += sg[j];
      }
      for (int j = 0; j < n; ++j) {
        const float p = sg[j];
        const float* v = rows + static_cast<int64_t>(j) * 2 * hd + hd;
#pragma omp simd
        for (int d = 0; d < hd; ++d) acc[d] += p * v[d];
      }
      part.max[g] = run_max;
      part.sum[g] = sum;
    }
    pos = run_end;
  }
}

}  // namespace
}  // namespace hs::cpu::detail
