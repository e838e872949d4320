// kv/kv_quant_kernel.h — the loops that read stored KV rows: decode, dot, axpy, the GQA
// piece kernels and attention over pieces. Written once and compiled per ISA
// (kv_quant.cpp baseline, kv_quant_avx2.cpp, kv_quant_avx512.cpp) so the `omp simd` loops
// and the vector helpers use that ISA's registers. Included only by those files.
//
// Everything in the anonymous namespace has internal linkage: an inline function shared by
// files built with different -m flags could be linked to the wrong ISA's body (the rule of
// core/simd_math.h, whose exp and 16-lane helpers this reuses — header-only, no link
// dependency). For that reason nothing here calls core/fp16.h.
// Cost: memory- or FMA-bound loops; a row is read once per call. The GQA kernels decode
// each row once and reuse it for every query head of the group; attend_fixed keeps the
// group's queries and outputs in registers (head_dim 64/128/256).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "core/simd_math.h"  // header-only, internal linkage: the one polynomial exp and v16f helpers
#include "kv/kv_quant.h"

namespace hs::kvq_detail {

inline constexpr int kMaxHeadDim = 512;  // decode buffer bound (stack)
inline constexpr int kPrefetchAhead = 2;  // pieces ahead that attend_fixed prefetches

struct KvQuantKernels {
  float (*dot)(KvStoreDtype, const float*, const void*, const void*, int);
  void (*axpy)(KvStoreDtype, float, const void*, const void*, float*, int);
  void (*scores)(const PieceView&, int, int, const float*, int, float, float*);
  void (*accumulate)(const PieceView&, int, int, const float*, int, float*);
  void (*attend)(const float*, int, const PieceSpan*, int, float, float*, float*, float*);
  const char* name;
};

KvQuantKernels kernels_avx2();
KvQuantKernels kernels_avx512();

namespace {

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positives on _mm512_undefined_*()
#pragma GCC diagnostic ignored "-Wuninitialized"        // inside the AVX-512 convert intrinsics at -O0/-O1

// Two f16 scale fields (little-endian halves) as floats.
[[maybe_unused]] float half_at(const void* p, int i) {
  _Float16 h;
  std::memcpy(&h, static_cast<const uint8_t*>(p) + 2 * i, 2);
  return static_cast<float>(h);
}

[[maybe_unused]] void decode_f16(const uint8_t* src, int n, float* y) {
  int i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
#endif
  for (; i < n; ++i) y[i] = half_at(src, i);
}

// ---- fp8 e4m3 (kv_quant.h) -----------------------------------------------------------
// The 256 byte values as floats (0x7F / 0xFF: NaN); for the scalar paths and row tails.
struct Fp8Table {
  float v[256];
};
constexpr Fp8Table make_fp8_table() {
  Fp8Table t{};
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 3) & 15, m = b & 7;
    float v = 0.0f;
    if (e == 15 && m == 7) {
      v = __builtin_nanf("");
    } else {
      // e > 0: (8 + m) · 2^(e − 10); e = 0: m · 2^-9. Powers of two: exact.
      v = static_cast<float>(e == 0 ? m : 8 + m);
      for (int k = 0; k < (e == 0 ? 9 : 10 - e); ++k) v *= 0.5f;
      for (int k = 0; k < e - 10; ++k) v *= 2.0f;
    }
    t.v[b] = (b & 0x80) ? -v : v;
  }
  return t;
}
constexpr Fp8Table kFp8Table = make_fp8_table();

// 16 e4m3 bytes times d. SIMD: byte (s, e, m) becomes the f16 bits s·0x8000 | (e, m) << 7,
// i.e. the value · 2^-8 (e4m3's subnormals land on f16 subnormals), converted with vcvtph2ps
// and scaled by d · 2^8; 0x7F / 0xFF get an all-ones f16 exponent (NaN). Every product is
// exact, so this equals d · kFp8Table[byte] bit for bit.
[[maybe_unused]] simd::v16f load_fp8x16(const uint8_t* p, float d) {
  simd::v16f out;
#if defined(__AVX2__) && defined(__F16C__)
  const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7f));
  const __m256i sign = _mm256_and_si256(_mm256_slli_epi16(w, 8), _mm256_set1_epi16(static_cast<short>(0x8000)));
  const __m256i nan = _mm256_and_si256(_mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7c00));
  const __m256i h = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi16(mag, 7), sign), nan);
#if defined(__AVX512F__)
  const __m512 f = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(d * 256.0f));
  std::memcpy(&out, &f, 64);
#else
  const __m256 ds = _mm256_set1_ps(d * 256.0f);
  const __m256 lo = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), ds);
  const __m256 hi = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), ds);
  std::memcpy(&out, &lo, 32);
  std::memcpy(reinterpret_cast<char*>(&out) + 32, &hi, 32);
#endif
#else
  for (int i = 0; i < 16; ++i) out[i] = d * kFp8Table.v[p[i]];
#endif
  return out;
}

// decode(row) into y [hd].
[[maybe_unused]] void decode_row_k(KvStoreDtype t, const uint8_t* row, const uint8_t* scale, int hd, float* y) {
  switch (t) {
    case KvStoreDtype::kF32:
      std::memcpy(y, row, static_cast<size_t>(hd) * 4);
      return;
    case KvStoreDtype::kF16:
      decode_f16(row, hd, y);
      return;
    case KvStoreDtype::kBF16: {
      uint16_t b[kMaxHeadDim];  // [hd]
      std::memcpy(b, row, static_cast<size_t>(hd) * 2);
      uint32_t u[kMaxHeadDim];  // [hd] widened bits
#pragma omp simd
      for (int d = 0; d < hd; ++d) u[d] = static_cast<uint32_t>(b[d]) << 16;
      std::memcpy(y, u, static_cast<size_t>(hd) * 4);
      return;
    }
    case KvStoreDtype::kInt8: {
      const int8_t* q = reinterpret_cast<const int8_t*>(row);
      const float d = half_at(scale, 0);
#pragma omp simd
      for (int i = 0; i < hd; ++i) y[i] = d * static_cast<float>(q[i]);
      return;
    }
    case KvStoreDtype::kInt4: {
      const float d = half_at(scale, 0), m = half_at(scale, 1);
      const int h = hd / 2;
#pragma omp simd
      for (int j = 0; j < h; ++j) {
        y[j] = m + d * static_cast<float>(row[j] & 15);
        y[j + h] = m + d * static_cast<float>(row[j] >> 4);
      }
      return;
    }
    case KvStoreDtype::kFp8: {
      const float d = half_at(scale, 0);
      int i = 0;
      for (; i + 16 <= hd; i += 16) {
        const simd::v16f v = load_fp8x16(row + i, d);
        std::memcpy(y + i, &v, sizeof(v));
      }
      for (; i < hd; ++i) y[i] = d * kFp8Table.v[row[i]];
      return;
    }
  }
}

[[maybe_unused]] float dot_f32(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// q · decode(row), fused for the quantized types (no decode buffer).
[[maybe_unused]] float dot_row_k(KvStoreDtype t, const float* q, const void* row_v, const void* scale, int hd) {
  const uint8_t* row = static_cast<const uint8_t*>(row_v);
  switch (t) {
    case KvStoreDtype::kInt8: {
      const int8_t* k = reinterpret_cast<const int8_t*>(row);
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int i = 0; i < hd; ++i) s += q[i] * static_cast<float>(k[i]);
      return s * half_at(scale, 0);
    }
    case KvStoreDtype::kInt4: {
      // q · (m + d u) = d (q · u) + m Σq
      const int h = hd / 2;
      float s = 0.0f, qs = 0.0f;
#pragma omp simd reduction(+ : s, qs)
      for (int j = 0; j < h; ++j) {
        s += q[j] * static_cast<float>(row[j] & 15) + q[j + h] * static_cast<float>(row[j] >> 4);
        qs += q[j] + q[j + h];
      }
      return half_at(scale, 0) * s + half_at(scale, 1) * qs;
    }
    case KvStoreDtype::kF32:
      return dot_f32(q, reinterpret_cast<const float*>(row), hd);
    default: {
      float y[kMaxHeadDim];  // [hd]
      decode_row_k(t, row, static_cast<const uint8_t*>(scale), hd, y);
      return dot_f32(q, y, hd);
    }
  }
}

// acc += w · decode(row).
[[maybe_unused]] void axpy_row_k(KvStoreDtype t, float w, const void* row_v, const void* scale, float* acc, int hd) {
  const uint8_t* row = static_cast<const uint8_t*>(row_v);
  switch (t) {
    case KvStoreDtype::kInt8: {
      const int8_t* v = reinterpret_cast<const int8_t*>(row);
      const float wd = w * half_at(scale, 0);
#pragma omp simd
      for (int i = 0; i < hd; ++i) acc[i] += wd * static_cast<float>(v[i]);
      return;
    }
    case KvStoreDtype::kInt4: {
      const float wd = w * half_at(scale, 0), wm = w * half_at(scale, 1);
      const int h = hd / 2;
#pragma omp simd
      for (int j = 0; j < h; ++j) {
        acc[j] += wm + wd * static_cast<float>(row[j] & 15);
        acc[j + h] += wm + wd * static_cast<float>(row[j] >> 4);
      }
      return;
    }
    default: {
      float y[kMaxHeadDim];  // [hd]
      decode_row_k(t, row, static_cast<const uint8_t*>(scale), hd, y);
#pragma omp simd
      for (int i = 0; i < hd; ++i) acc[i] += w * y[i];
      return;
    }
  }
}

[[maybe_unused]] void piece_scores_k(const PieceView& pv, int t0, int n, const float* q, int n_q, float scale,
                                     float* scores) {
  const PieceLayout& L = *pv.layout;
  const int hd = L.head_dim;
  float y[kMaxHeadDim];  // [hd] decoded K row, reused by the group
  for (int j = 0; j < n; ++j) {
    decode_row_k(L.dtype, pv.k_row(t0 + j), pv.k_scale(t0 + j), hd, y);
    for (int g = 0; g < n_q; ++g) scores[g * n + j] = scale * dot_f32(q + static_cast<int64_t>(g) * hd, y, hd);
  }
}

[[maybe_unused]] void piece_accumulate_k(const PieceView& pv, int t0, int n, const float* p, int n_q, float* acc) {
  const PieceLayout& L = *pv.layout;
  const int hd = L.head_dim;
  float y[kMaxHeadDim];  // [hd] decoded V row, reused by the group
  for (int j = 0; j < n; ++j) {
    decode_row_k(L.dtype, pv.v_row(t0 + j), pv.v_scale(t0 + j), hd, y);
    for (int g = 0; g < n_q; ++g) {
      const float w = p[g * n + j];
      float* a = acc + static_cast<int64_t>(g) * hd;
#pragma omp simd
      for (int i = 0; i < hd; ++i) a[i] += w * y[i];
    }
  }
}

// ---- attention over pieces ------------------------------------------------------------
using simd::exp_nonpositive;
using simd::hsum_v16;
using simd::load_i8x16;
using simd::load_v16;
using simd::store_v16;
using simd::v16f;

constexpr int kMaxGroup = 16;  // query heads per pass of the fixed kernel

// 16 signed bytes -> 16 floats (GCC 12 scalarizes __builtin_convertvector from bytes).

// 16 bytes -> their low nibbles and high nibbles as floats.
[[maybe_unused]] void load_u4x32(const uint8_t* p, v16f* lo_out, v16f* hi_out) {
#if defined(__AVX512F__) || defined(__AVX2__)
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(b, mask), hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
#if defined(__AVX512F__)
  const __m512 flo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), fhi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi));
  std::memcpy(lo_out, &flo, 64);
  std::memcpy(hi_out, &fhi, 64);
#else
  const __m256 l0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), l1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
  const __m256 h0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), h1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
  std::memcpy(lo_out, &l0, 32);
  std::memcpy(reinterpret_cast<char*>(lo_out) + 32, &l1, 32);
  std::memcpy(hi_out, &h0, 32);
  std::memcpy(reinterpret_cast<char*>(hi_out) + 32, &h1, 32);
#endif
#else
  for (int i = 0; i < 16; ++i) {
    (*lo_out)[i] = static_cast<float>(p[i] & 15);
    (*hi_out)[i] = static_cast<float>(p[i] >> 4);
  }
#endif
}

// 16 bf16 -> 16 floats.
[[maybe_unused]] v16f load_bf16x16(const uint8_t* p) {
  v16f out;
#if defined(__AVX512F__)
  const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
  std::memcpy(&out, &w, sizeof(out));
#elif defined(__AVX2__)
  const __m256i lo = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
  const __m256i hi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))), 16);
  std::memcpy(&out, &lo, 32);
  std::memcpy(reinterpret_cast<char*>(&out) + 32, &hi, 32);
#else
  for (int i = 0; i < 16; ++i) {
    const uint32_t u = static_cast<uint32_t>(p[2 * i] | p[2 * i + 1] << 8) << 16;
    std::memcpy(&out[i], &u, 4);
  }
#endif
  return out;
}

// Row (data + scales) -> NV float vectors, head_dim = 16·NV known at compile time.
template <int NV, KvStoreDtype t>
[[gnu::always_inline]] inline void load_row(const uint8_t* row, const uint8_t* scale, v16f* out) {
  switch (t) {  // a constant: one case survives
    case KvStoreDtype::kF32:
      for (int i = 0; i < NV; ++i) out[i] = load_v16(reinterpret_cast<const float*>(row) + 16 * i);
      return;
    case KvStoreDtype::kF16:
      for (int i = 0; i < NV; ++i) out[i] = load_v16(reinterpret_cast<const _Float16*>(row) + 16 * i);
      return;
    case KvStoreDtype::kBF16:
      for (int i = 0; i < NV; ++i) out[i] = load_bf16x16(row + 32 * i);
      return;
    case KvStoreDtype::kInt8: {
      const float d = half_at(scale, 0);
      for (int i = 0; i < NV; ++i) out[i] = load_i8x16(row + 16 * i) * d;
      return;
    }
    case KvStoreDtype::kFp8: {
      const float d = half_at(scale, 0);
      for (int i = 0; i < NV; ++i) out[i] = load_fp8x16(row + 16 * i, d);
      return;
    }
    case KvStoreDtype::kInt4: {
      const float d = half_at(scale, 0), m = half_at(scale, 1);
      for (int i = 0; i < NV / 2; ++i) {  // bytes [16i, 16i+16): elements 16i.. (low), hd/2 + 16i.. (high)
        load_u4x32(row + 16 * i, &out[i], &out[i + NV / 2]);
        out[i] = out[i] * d + m;
        out[i + NV / 2] = out[i + NV / 2] * d + m;
      }
      return;
    }
  }
}

// One pass over the pieces with the group's queries and outputs in registers (the scheme
// of backend/cpu/attention_kernel.h): each K and V row is decoded once for all n_q heads.
// G > 0: the group size at compile time, so queries and accumulators stay in registers
// (G = 0: any n_q up to kMaxGroup). T: the pieces' dtype (all spans share one layout).
template <int NV, int G, KvStoreDtype T>
void attend_fixed_t(const float* q, int n_q_runtime, const PieceSpan* spans, int n_spans, float scale,
                    float* max_out, float* sum_out, float* acc_out) {
  constexpr int hd = 16 * NV;
  const int n_q = G > 0 ? G : n_q_runtime;
  constexpr int kG = G > 0 ? G : kMaxGroup;
  v16f qv[kG][NV];
  v16f acc[kG][NV];
  float mx[kG], sm[kG];
  for (int g = 0; g < n_q; ++g) {
    for (int i = 0; i < NV; ++i) {
      qv[g][i] = load_v16(q + g * hd + 16 * i) * scale;
      acc[g][i] = v16f{};
    }
    mx[g] = -INFINITY;
    sm[g] = 0.0f;
  }
  float s[kG][64];  // [n_q][C] scores, then probabilities, of one piece
  for (int sp = 0; sp < n_spans; ++sp) {
    const PieceView& pv = spans[sp].view;
    const int f = spans[sp].first, n = spans[sp].n_valid;  // tokens [f, n) of the piece
    if (f >= n) continue;
    // Pieces are scattered (hot slots, host pages) and each is a DRAM read: fetch the piece
    // kPrefetchAhead ahead into L2 whole (the first ones at the start).
    for (int a = sp == 0 ? 0 : kPrefetchAhead; a <= kPrefetchAhead; ++a) {
      if (sp + a >= n_spans) break;
      const PieceView& nv = spans[sp + a].view;
      const int64_t lines = (nv.layout->bytes + 63) / 64;
      for (int64_t line = 0; line < lines && line < 256; ++line) __builtin_prefetch(nv.base + 64 * line, 0, 2);
    }
    for (int j = f; j < n; ++j) {
      v16f kr[NV];
      load_row<NV, T>(pv.k_row(j), pv.k_scale(j), kr);
      for (int g = 0; g < n_q; ++g) {
        v16f a = qv[g][0] * kr[0];
        for (int i = 1; i < NV; ++i) a += qv[g][i] * kr[i];
        s[g][j] = hsum_v16(a);
      }
    }
    for (int g = 0; g < n_q; ++g) {
      float run_max = mx[g];
      for (int j = f; j < n; ++j) run_max = s[g][j] > run_max ? s[g][j] : run_max;
      const float correction = mx[g] == -INFINITY ? 0.0f : exp_nonpositive(mx[g] - run_max);
      if (correction != 1.0f)
        for (int i = 0; i < NV; ++i) acc[g][i] *= correction;
      float sum = sm[g] * correction;
      float* sg = s[g];
#pragma omp simd reduction(+ : sum)
      for (int j = f; j < n; ++j) {
        sg[j] = exp_nonpositive(sg[j] - run_max);
        sum += sg[j];
      }
      mx[g] = run_max;
      sm[g] = sum;
    }
    for (int j = f; j < n; ++j) {
      v16f vr[NV];
      load_row<NV, T>(pv.v_row(j), pv.v_scale(j), vr);
      for (int g = 0; g < n_q; ++g) {
        const float p = s[g][j];
        for (int i = 0; i < NV; ++i) acc[g][i] += p * vr[i];
      }
    }
  }
  for (int g = 0; g < n_q; ++g) {
    max_out[g] = mx[g];
    sum_out[g] = sm[g];
    for (int i = 0; i < NV; ++i) store_v16(acc_out + g * hd + 16 * i, acc[g][i]);
  }
}

template <int NV, int G>
void attend_fixed_g(const float* q, int n_q, const PieceSpan* spans, int n_spans, float scale, float* max_out,
                    float* sum_out, float* acc_out) {
  switch (spans[0].view.layout->dtype) {
    case KvStoreDtype::kF32: return attend_fixed_t<NV, G, KvStoreDtype::kF32>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
    case KvStoreDtype::kF16: return attend_fixed_t<NV, G, KvStoreDtype::kF16>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
    case KvStoreDtype::kBF16: return attend_fixed_t<NV, G, KvStoreDtype::kBF16>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
    case KvStoreDtype::kInt8: return attend_fixed_t<NV, G, KvStoreDtype::kInt8>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
    case KvStoreDtype::kInt4: return attend_fixed_t<NV, G, KvStoreDtype::kInt4>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
    case KvStoreDtype::kFp8: return attend_fixed_t<NV, G, KvStoreDtype::kFp8>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
  }
}

template <int NV>
void attend_fixed(const float* q, int n_q, const PieceSpan* spans, int n_spans, float scale, float* max_out,
                  float* sum_out, float* acc_out) {
  switch (n_q) {
    case 1: return attend_fixed_g<NV, 1>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
    case 2: return attend_fixed_g<NV, 2>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
    case 3: return attend_fixed_g<NV, 3>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
    case 4: return attend_fixed_g<NV, 4>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
    default: return attend_fixed_g<NV, 0>(q, n_q, spans, n_spans, scale, max_out, sum_out, acc_out);
  }
}

// Any head_dim / group size: the decode-buffer kernels above.
[[maybe_unused]] void attend_generic(const float* q, int n_q, const PieceSpan* spans, int n_spans, float scale,
                                     float* max, float* sum, float* acc) {
  const int hd = n_spans > 0 ? spans[0].view.layout->head_dim : 0;
  for (int g = 0; g < n_q; ++g) {
    max[g] = -INFINITY;
    sum[g] = 0.0f;
    for (int d = 0; d < hd; ++d) acc[g * hd + d] = 0.0f;
  }
  float s[kPieceAttnMaxGroup * 64];  // [n_q][n] scores, then probabilities, of one piece
  for (int i = 0; i < n_spans; ++i) {
    const int f = spans[i].first, n = spans[i].n_valid - f;  // tokens [f, f + n) of the piece
    if (n <= 0) continue;
    piece_scores_k(spans[i].view, f, n, q, n_q, scale, s);
    for (int g = 0; g < n_q; ++g) {
      float* sg = s + g * n;
      float m = max[g];
      for (int j = 0; j < n; ++j) m = sg[j] > m ? sg[j] : m;
      const float correction = max[g] == -INFINITY ? 0.0f : exp_nonpositive(max[g] - m);
      float total = sum[g] * correction;
      for (int j = 0; j < n; ++j) {
        sg[j] = exp_nonpositive(sg[j] - m);
        total += sg[j];
      }
      if (correction != 1.0f)
        for (int d = 0; d < hd; ++d) acc[g * hd + d] *= correction;
      max[g] = m;
      sum[g] = total;
    }
    piece_accumulate_k(spans[i].view, f, n, s, n_q, acc);
  }
}

[[maybe_unused]] void attend_k(const float* q, int n_q, const PieceSpan* spans, int n_spans, float scale, float* max,
                               float* sum, float* acc) {
  if (n_q <= kMaxGroup && n_spans > 0) {
    switch (spans[0].view.layout->head_dim) {
      case 64: return attend_fixed<4>(q, n_q, spans, n_spans, scale, max, sum, acc);
      case 128: return attend_fixed<8>(q, n_q, spans, n_spans, scale, max, sum, acc);
      case 256: return attend_fixed<16>(q, n_q, spans, n_spans, scale, max, sum, acc);
      default: break;
    }
  }
  attend_generic(q, n_q, spans, n_spans, scale, max, sum, acc);
}

[[maybe_unused]] KvQuantKernels make_kernels(const char* name) {
  return {dot_row_k, axpy_row_k, piece_scores_k, piece_accumulate_k, attend_k, name};
}

}  // namespace
}  // namespace hs::kvq_detail
