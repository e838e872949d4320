// backend/cpu/matmul_q32_avx512.cpp — AVX-512 (BW, VL, VNNI) kernels for the 32-wide quant
// types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//
// Same scheme as the AVX2 file, twice as wide: a 512-bit register holds a *pair* of
// consecutive blocks, so one vpdpbusd does the 64 u8 x s8 products of two blocks (16 int32
// lanes: 8 per block). Scales are handled per group of 16 blocks: 16 scalar loads fetch the
// fp16 scales (and mins) of a row, one multiply forms dw * da for a token, and per pair a
// vpermps expands the two blocks' factors to their 8 lanes each. Q8_0 weights are made
// unsigned with ^0x80 (w + 128) and the extra 128 * sum(a) is removed through the same
// "min" path (m = -128 dw) the symmetric types use (m = -8 dw / -16 dw).
// The nibble types (Q4_0/Q4_1/Q5_0/Q5_1) go further with the "x4" activation layout: four
// blocks' 64 packed bytes are one register, low nibbles of all four match one 64-byte
// activation load and high nibbles the next, and two vpdpbusd leave 4 int32 lanes per block;
// blocks past the last multiple of 4 use the pair path.
// Cost per (row, token, 4 blocks): 2 dpbusd, cvt, permute, fma (pairs: twice cvt, permute,
// fma); per (row, 4 blocks): 3 inserts, and, shift, and (+ pext and 2 masked adds for Q5).
// kInt8x2 adds per (row, token) a second pair of vpdpbusd on the residual row, seeded with
// the first sum shifted left by 8 (256 * dot1 + dot2, exact), so the fp32 work is unchanged.
// Matvec R=4, T=1; several tokens R=4, T<=4 (32 registers).
// GCC 12's AVX-512 headers build results from _mm512_undefined_*() and then warn that
// the value "may be used uninitialized" once inlined here: a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstring>

#include "backend/cpu/matmul_avx2_common.h"
#include "backend/cpu/matmul_kernels.h"

namespace hs::cpu::detail {
namespace {

using avx2::run_tiles;

enum class MinMode { kStored, kOffset };

inline __m512i nibbles_pair(const uint8_t* qs0, const uint8_t* qs1, bool two) {
  const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0));
  const __m128i x1 = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)) : _mm_setzero_si128();
  const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(x0), x1, 1);
  // [x0, x0, x1, x1] as 128-bit lanes, then the 2nd and 4th lane shifted to their high nibbles.
  __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                                       _mm512_castsi256_si512(x));
  z = _mm512_mask_srli_epi64(z, 0xcc, z, 4);
  return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

inline uint64_t qh_pair(const uint8_t* qh0, const uint8_t* qh1, bool two) {
  uint32_t h0, h1 = 0;
  std::memcpy(&h0, qh0, 4);
  if (two) std::memcpy(&h1, qh1, 4);
  return static_cast<uint64_t>(h0) | (static_cast<uint64_t>(h1) << 32);
}

inline __m512i add_fifth_bits(__m512i q, uint64_t bits) {
  return _mm512_mask_add_epi8(q, _cvtu64_mask64(bits), q, _mm512_set1_epi8(0x10));
}

// Four consecutive nibble blocks (qs at offset kQsOff, 5th bits at kQhOff or none): lo gets
// [quants 0-15 of blocks 0..3], hi [quants 16-31 of blocks 0..3], matching the "x4"
// activation layout. One 64-byte register per half, no cross-lane shuffle.
template <int kBytes, int kQsOff, int kQhOff>
inline void unpack_quad(const uint8_t* p, __m512i& lo, __m512i& hi) {
  auto ld = [&](int k) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k * kBytes + kQsOff)); };
  __m512i z = _mm512_castsi128_si512(ld(0));
  z = _mm512_inserti32x4(z, ld(1), 1);
  z = _mm512_inserti32x4(z, ld(2), 2);
  z = _mm512_inserti32x4(z, ld(3), 3);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  lo = _mm512_and_si512(z, low4);
  hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), low4);
  if constexpr (kQhOff >= 0) {
    // Bit j of block k's qh is element j: bits 0-15 go to lo bytes 16k.., 16-31 to hi.
    uint32_t h[4];
    for (int k = 0; k < 4; ++k) std::memcpy(&h[k], p + k * kBytes + kQhOff, 4);
    const uint64_t a = h[0] | (static_cast<uint64_t>(h[1]) << 32);
    const uint64_t b = h[2] | (static_cast<uint64_t>(h[3]) << 32);
    const uint64_t m_lo = _pext_u64(a, 0x0000ffff0000ffffull) | (_pext_u64(b, 0x0000ffff0000ffffull) << 32);
    const uint64_t m_hi = _pext_u64(a, 0xffff0000ffff0000ull) | (_pext_u64(b, 0xffff0000ffff0000ull) << 32);
    lo = add_fifth_bits(lo, m_lo);
    hi = add_fifth_bits(hi, m_hi);
  }
}

// Weight traits. unpack2: two consecutive blocks as one register in natural order (the
// second zero when !two). kQuad types also have unpack4 for the "x4" activation layout.
struct Q4_0W {
  static constexpr int kBytes = 18;
  static constexpr MinMode kMin = MinMode::kOffset;
  static constexpr float kOffset = -8.0f;
  static constexpr bool kQuad = true;
  static __m512i unpack2(const uint8_t* p, bool two) { return nibbles_pair(p + 2, p + kBytes + 2, two); }
  static void unpack4(const uint8_t* p, __m512i& lo, __m512i& hi) { unpack_quad<kBytes, 2, -1>(p, lo, hi); }
};
struct Q4_1W {
  static constexpr int kBytes = 20;
  static constexpr MinMode kMin = MinMode::kStored;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kQuad = true;
  static __m512i unpack2(const uint8_t* p, bool two) { return nibbles_pair(p + 4, p + kBytes + 4, two); }
  static void unpack4(const uint8_t* p, __m512i& lo, __m512i& hi) { unpack_quad<kBytes, 4, -1>(p, lo, hi); }
};
struct Q5_0W {
  static constexpr int kBytes = 22;
  static constexpr MinMode kMin = MinMode::kOffset;
  static constexpr float kOffset = -16.0f;
  static constexpr bool kQuad = true;
  static __m512i unpack2(const uint8_t* p, bool two) {
    return add_fifth_bits(nibbles_pair(p + 6, p + kBytes + 6, two), qh_pair(p + 2, p + kBytes + 2, two));
  }
  static void unpack4(const uint8_t* p, __m512i& lo, __m512i& hi) { unpack_quad<kBytes, 6, 2>(p, lo, hi); }
};
struct Q5_1W {
  static constexpr int kBytes = 24;
  static constexpr MinMode kMin = MinMode::kStored;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kQuad = true;
  static __m512i unpack2(const uint8_t* p, bool two) {
    return add_fifth_bits(nibbles_pair(p + 8, p + kBytes + 8, two), qh_pair(p + 4, p + kBytes + 4, two));
  }
  static void unpack4(const uint8_t* p, __m512i& lo, __m512i& hi) { unpack_quad<kBytes, 8, 4>(p, lo, hi); }
};
struct Q8_0W {
  static constexpr int kBytes = 34;
  static constexpr MinMode kMin = MinMode::kOffset;
  static constexpr float kOffset = -128.0f;
  static constexpr bool kQuad = false;
  static __m512i unpack2(const uint8_t* p, bool two) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    const __m256i x1 = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kBytes + 2))
                           : _mm256_set1_epi8(static_cast<char>(0x80));  // -> 0 after the xor
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1);
    return _mm512_xor_si512(z, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static void unpack4(const uint8_t*, __m512i&, __m512i&) {}
};

inline int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The first 4 bytes of n <= 16 consecutive blocks of kBytes (zero past n). Scalar loads, not
// vpgatherdd: a gather that misses the cache stalls the pipeline on these CPUs (measured:
// matvec from DRAM ran at 1/3 of the bandwidth with gathers). A short group reads past its
// row into the next one (masked off after) unless that would leave the weight at `end`.
template <int kBytes>
inline __m512i block_heads(const uint8_t* p, int n, const uint8_t* end) {
  if (n <= 8 && p + 7 * kBytes + 4 <= end) {  // a short tail group: 8 loads are enough
    const __m256i lo = _mm256_setr_epi32(
        load_i32(p), load_i32(p + kBytes), load_i32(p + 2 * kBytes), load_i32(p + 3 * kBytes),
        load_i32(p + 4 * kBytes), load_i32(p + 5 * kBytes), load_i32(p + 6 * kBytes),
        load_i32(p + 7 * kBytes));
    return _mm512_maskz_mov_epi32(static_cast<__mmask16>((1u << n) - 1u), _mm512_castsi256_si512(lo));
  }
  if (n == 16 || p + 15 * kBytes + 4 <= end) {
    const __m256i lo = _mm256_setr_epi32(
        load_i32(p), load_i32(p + kBytes), load_i32(p + 2 * kBytes), load_i32(p + 3 * kBytes),
        load_i32(p + 4 * kBytes), load_i32(p + 5 * kBytes), load_i32(p + 6 * kBytes),
        load_i32(p + 7 * kBytes));
    const uint8_t* q = p + 8 * kBytes;
    const __m256i hi = _mm256_setr_epi32(
        load_i32(q), load_i32(q + kBytes), load_i32(q + 2 * kBytes), load_i32(q + 3 * kBytes),
        load_i32(q + 4 * kBytes), load_i32(q + 5 * kBytes), load_i32(q + 6 * kBytes),
        load_i32(q + 7 * kBytes));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return n == 16 ? v : _mm512_maskz_mov_epi32(static_cast<__mmask16>((1u << n) - 1u), v);
  }
  alignas(64) int32_t v[16] = {};
  for (int k = 0; k < n; ++k) v[k] = load_i32(p + k * kBytes);
  return _mm512_load_si512(v);
}

template <class W>
struct Q32Kernel {
  template <int R, int T>
  static void run(const TileArgs& a, int64_t o, int64_t t0) {
    if (a.x2) {
      run_impl<R, T, true>(a, o, t0);
    } else {
      run_impl<R, T, false>(a, o, t0);
    }
  }

  // kX2: token t's activations are rows 2t (q1) and 2t+1 (residual q2, scale d1 / 256);
  // the integer dot is 256 * dot(w, q1) + dot(w, q2), exact in int32 (|lane| < 2^26).
  template <int R, int T, bool kX2>
  static void run_impl(const TileArgs& a, int64_t o, int64_t t0) {
    constexpr int64_t kRows = kX2 ? 2 : 1;  // activation rows per token
    const int64_t nb = a.n_in / kQ8Block;
    const int64_t nb4 = nb / 4 * 4;  // blocks [0, nb4) use the "x4" layout (kQuad types)
    const uint8_t* rows[R];
    for (int r = 0; r < R; ++r) rows[r] = a.w + (o + r) * a.row_bytes;  // [nb][kBytes]
    // One prefetch step per pair of blocks (two per quad).
    avx2::SpanPrefetcher pf(rows[0], R * a.row_bytes, (nb + 1) / 2, a.stream);
    const uint8_t* w_end = a.w + a.n_out * a.row_bytes;
    const int8_t* qa[T];
    for (int t = 0; t < T; ++t) qa[t] = a.qs + (t0 + t) * kRows * a.n_in;  // [kRows][n_in]
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    const __m512i pair0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (int64_t g = 0; g < nb; g += 16) {
      const int n = nb - g < 16 ? static_cast<int>(nb - g) : 16;
      const __mmask16 ok = static_cast<__mmask16>((1u << n) - 1u);
      __m512 dw[R], mw[R];
      for (int r = 0; r < R; ++r) {
        // The first 32 bits of each block: fp16 d in the low half, fp16 m (if any) in the high.
        const __m512i raw = block_heads<W::kBytes>(rows[r] + g * W::kBytes, n, w_end);
        dw[r] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw));
        if constexpr (W::kMin == MinMode::kStored) {
          mw[r] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(raw, 16)));
        } else {
          mw[r] = _mm512_mul_ps(dw[r], _mm512_set1_ps(W::kOffset));
        }
      }
      __m512 dd[R][T];  // dw * da per block of the group
      for (int t = 0; t < T; ++t) {
        const int64_t base = (t0 + t) * kRows * nb + g;  // row 2t (x2) or t
        // The combined dot's scale: d of the last row (d1 / 256 for x2).
        const __m512 da = _mm512_maskz_loadu_ps(ok, a.d + base + (kRows - 1) * nb);
        __m512 sa = _mm512_maskz_loadu_ps(ok, a.s + base);
        if constexpr (kX2) sa = _mm512_add_ps(sa, _mm512_maskz_loadu_ps(ok, a.s + base + nb));
        for (int r = 0; r < R; ++r) {
          dd[r][t] = _mm512_mul_ps(dw[r], da);
          acc[r][t] = _mm512_fmadd_ps(mw[r], sa, acc[r][t]);
        }
      }
      auto step = [&](int k, __m512i idx, bool two) {
        __m512i q[R];
        for (int r = 0; r < R; ++r) q[r] = W::unpack2(rows[r] + (g + k) * W::kBytes, two);
        pf.step();
        auto load_acts = [&](const int8_t* ap) {
          return two ? _mm512_loadu_si512(ap)
                     : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap)));
        };
        for (int t = 0; t < T; ++t) {
          const int8_t* ap = qa[t] + (g + k) * kQ8Block;
          const __m512i av = load_acts(ap);
          __m512i av2 = av;
          if constexpr (kX2) av2 = load_acts(ap + a.n_in);
          for (int r = 0; r < R; ++r) {
            __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[r], av);
            if constexpr (kX2) isum = _mm512_dpbusd_epi32(_mm512_slli_epi32(isum, 8), q[r], av2);
            acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_permutexvar_ps(idx, dd[r][t]),
                                        acc[r][t]);
          }
        }
      };
      int k = 0;
      if constexpr (W::kQuad) {
        // Whole quads of the "x4" layout: blocks [g + k, g + k + 4) with g + k + 4 <= nb4.
        const __m512i quad0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        for (; k + 4 <= n && g + k + 4 <= nb4; k += 4) {
          __m512i lo[R], hi[R];
          for (int r = 0; r < R; ++r) W::unpack4(rows[r] + (g + k) * W::kBytes, lo[r], hi[r]);
          pf.step();
          pf.step();
          const __m512i idx = _mm512_add_epi32(quad0, _mm512_set1_epi32(k));
          for (int t = 0; t < T; ++t) {
            const int8_t* ap = qa[t] + (g + k) * kQ8Block;
            const __m512i alo = _mm512_loadu_si512(ap);
            const __m512i ahi = _mm512_loadu_si512(ap + 64);
            __m512i alo2 = alo, ahi2 = ahi;
            if constexpr (kX2) {
              alo2 = _mm512_loadu_si512(ap + a.n_in);
              ahi2 = _mm512_loadu_si512(ap + a.n_in + 64);
            }
            for (int r = 0; r < R; ++r) {
              __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], alo),
                                              hi[r], ahi);
              if constexpr (kX2) {
                s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(s, 8), lo[r], alo2),
                                        hi[r], ahi2);
              }
              acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(idx, dd[r][t]), acc[r][t]);
            }
          }
        }
      }
      __m512i idx = _mm512_add_epi32(pair0, _mm512_set1_epi32(k));
      for (; k + 2 <= n; k += 2) {
        step(k, idx, true);
        idx = _mm512_add_epi32(idx, _mm512_set1_epi32(2));
      }
      if (k < n) step(k, idx, false);
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.n_out + o + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
};

// Q8 activations in the "x4" layout (see matmul_kernels.h); quants bitwise equal to the
// other levels' quantizers (same amax, same x * (1/d), round half to even).
void quantize_q8_x4_avx512(const float* x, int64_t n_in, int8_t* qs, float* d, float* s,
                           float* resid, const float* parent_d) {
  const int64_t nb = n_in / kQ8Block;
  const int64_t nb4 = nb / 4 * 4;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * kQ8Block);
    const __m512 v1 = _mm512_loadu_ps(x + b * kQ8Block + 16);
    float db, id;
    if (parent_d != nullptr) {  // residual row: scale parent / 256 (exact), quants clamped
      db = parent_d[b] * (1.0f / 256.0f);
      id = parent_d[b] != 0.0f ? 256.0f / parent_d[b] : 0.0f;
    } else {
      const float amax = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
      db = amax / 127.0f;
      id = db != 0.0f ? 1.0f / db : 0.0f;
    }
    const __m512i i0 = _mm512_max_epi32(
        nlim, _mm512_min_epi32(lim, _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)))));
    const __m512i i1 = _mm512_max_epi32(
        nlim, _mm512_min_epi32(lim, _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)))));
    int8_t* first = b < nb4 ? qs + 128 * (b / 4) + 16 * (b % 4) : qs + b * kQ8Block;  // [16]
    int8_t* second = b < nb4 ? first + 64 : first + 16;                                 // [16]
    if (resid) {  // x - d * q as two roundings (no FMA), like the scalar reference
      const __m512 vd = _mm512_set1_ps(db);
      _mm512_storeu_ps(resid + b * kQ8Block, _mm512_sub_ps(v0, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(i0))));
      _mm512_storeu_ps(resid + b * kQ8Block + 16, _mm512_sub_ps(v1, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(i1))));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(first), _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(second), _mm512_cvtsepi32_epi8(i1));
    d[b] = db;
    s[b] = db * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1)));
  }
}

}  // namespace

void fill_kernels_avx512_q32(KernelSet& ks) {
  ks.quantize_q8_x4 = quantize_q8_x4_avx512;
  ks.nibble_x4 = true;
  ks.q4_0 = run_tiles<Q32Kernel<Q4_0W>, 4, 2, 8>;
  ks.q4_1 = run_tiles<Q32Kernel<Q4_1W>, 4, 2, 8>;
  ks.q5_0 = run_tiles<Q32Kernel<Q5_0W>, 4, 2, 8>;
  ks.q5_1 = run_tiles<Q32Kernel<Q5_1W>, 4, 2, 8>;
  ks.q8_0 = run_tiles<Q32Kernel<Q8_0W>, 4, 4, 4>;
}

}  // namespace hs::cpu::detail
