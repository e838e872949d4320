// core/simd_math.h — small math and 16-lane vector helpers for host kernels (the CPU backend,
// the host KV codecs in kv/).
//
// Included by files compiled with different ISA flags (baseline, *_avx2.cpp, *_avx512.cpp):
// everything here has internal linkage (anonymous namespace), so each file keeps its own
// copy built for its ISA — an inline function with external linkage could be linked to the
// wrong ISA's body. Costs: a few instructions each; the exp is a polynomial, no libm call,
// so loops using it vectorize.
#pragma once

#include <cstdint>
#include <cstring>

#include <immintrin.h>

namespace hs::simd {
namespace {

// exp(x) for x <= 0 (softmax arguments), vectorizable: 2^n · p(r) with r = x - n·ln2,
// |r| <= ln2/2, degree-6 polynomial; relative error < 2e-7 (about 2 ulp). Inputs below
// -87 flush to 0.
[[maybe_unused]] float exp_nonpositive(float x) {
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

// ln x for a positive normal x (in the kernels a sum of exps in [1, C]): exponent from the bits, then
// ln m = 2 atanh((m − 1)/(m + 1)) by its series to z⁷, m ∈ [1, 2); abs error < 2e-5.
[[maybe_unused]] float fast_log(float x) {
  int32_t i;
  std::memcpy(&i, &x, 4);
  const int e = ((i >> 23) & 255) - 127;
  i = (i & 0x7FFFFF) | 0x3F800000;
  float m;
  std::memcpy(&m, &i, 4);
  const float z = (m - 1.0f) / (m + 1.0f), z2 = z * z;
  const float ln_m = 2.0f * z * (1.0f + z2 * (1.0f / 3 + z2 * (1.0f / 5 + z2 * (1.0f / 7))));
  return static_cast<float>(e) * 0.69314718f + ln_m;
}

// 16-lane vectors (one zmm on AVX-512, two ymm on AVX2); f16 rows convert with vcvtph2ps.
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors by value between internal functions
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive inside _mm512_cvtph_ps
typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
[[maybe_unused]] v16f load_v16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
[[maybe_unused]] v16f load_v16(const _Float16* p) {  // GCC 12 scalarizes a generic half→float vector convert
  v16f out;
#if defined(__AVX512F__)
  const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  std::memcpy(&out, &f, sizeof(out));
#elif defined(__F16C__)
  const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  std::memcpy(&out, &lo, 32);
  std::memcpy(reinterpret_cast<char*>(&out) + 32, &hi, 32);
#else
  for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(p[i]);
#endif
  return out;
}
// 16 signed bytes → 16 floats.
[[maybe_unused]] v16f load_i8x16(const uint8_t* p) {
  v16f out;
#if defined(__AVX512F__)
  const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  std::memcpy(&out, &f, sizeof(out));
#elif defined(__AVX2__)
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
  std::memcpy(&out, &lo, 32);
  std::memcpy(reinterpret_cast<char*>(&out) + 32, &hi, 32);
#else
  for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(static_cast<int8_t>(p[i]));
#endif
  return out;
}
[[maybe_unused]] void store_v16(float* p, v16f v) { std::memcpy(p, &v, sizeof(v)); }
[[maybe_unused]] float hsum_v16(v16f v) {
  const v8f a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const v4f b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

// sigmoid(z) = 1 / (1 + e^-z), through e = exp(−|z|) ∈ (0, 1] so it never overflows.
[[maybe_unused]] float sigmoid(float z) {
  const float e = exp_nonpositive(z < 0 ? z : -z);
  const float inv = 1.0f / (1.0f + e);
  return z >= 0 ? inv : e * inv;
}

}  // namespace
}  // namespace hs::simd
