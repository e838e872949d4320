// backend/cpu/matmul_qk_avx512.cpp — AVX-512 (BW, VL, VNNI) kernels for Q4_K, Q5_K, Q6_K.
//
// The AVX2 scheme at 512 bits: each register holds 64 weights, maddubs forms int16 pairs
// and vpdpwssd multiplies them by the int16 sub-block scale and accumulates into int32 in
// one instruction. For Q4_K/Q5_K the 64 bytes of nibbles qs[64h .. 64h+63] give sub-blocks
// [4h | 4h+2] (low nibbles) and [4h+1 | 4h+3] (high nibbles), so the activation is loaded
// as two 256-bit halves to match (paid once per token, shared by the R rows). Q5_K's fifth
// bits are added under a byte mask from vptestmb; Q6_K's two high bits are merged with one
// vpternlogd. Scale vectors come from one vpermw per 64 weights.
// Cost per (row, token, 256 elements): 8 multiply ops + ~5 for the min/offset and fp32
// scaling (kInt8x2: twice, on the value and the residual row, each int32 sum scaled on its
// own); per (row, super-block) ~25 ops of unpacking. Matvec R=4, T=1; several tokens
// R=2, T<=4.
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

constexpr int kQ4KBytes = 144;
constexpr int kQ5KBytes = 176;
constexpr int kQ6KBytes = 210;

inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 12 packed scale bytes -> 16 bytes [sc0..sc7, m0..m7] (layout: see matmul_qk_avx2.cpp).
inline __m128i k4_scales_mins(const uint8_t* packed) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t low6 = 0x3f3f3f3fu, low4 = 0x0f0f0f0fu, top2 = 0xc0c0c0c0u;
  const uint32_t sc03 = u[0] & low6;
  const uint32_t m03 = u[1] & low6;
  const uint32_t sc47 = (u[2] & low4) | ((u[0] & top2) >> 2);
  const uint32_t m47 = ((u[2] >> 4) & low4) | ((u[1] & top2) >> 2);
  return _mm_setr_epi32(static_cast<int>(sc03), static_cast<int>(sc47), static_cast<int>(m03),
                        static_cast<int>(m47));
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// [p[0..31] | p[64..95]]: the activations matching [sub-block j | sub-block j+2].
inline __m512i load_split(const int8_t* p) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(p)), load256(p + 64), 1);
}

// 32 int16 lane indices: lanes 0-15 -> word i0, lanes 16-31 -> word i1.
inline __m512i halves_idx(int i0, int i1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<short>(i0))),
                            _mm256_set1_epi16(static_cast<short>(i1)), 1);
}

template <bool kFive>
struct Q45KKernel {
  static constexpr int kBytes = kFive ? kQ5KBytes : kQ4KBytes;
  static constexpr int kQsOff = kFive ? 48 : 16;

  template <int R, int T>
  static void run(const TileArgs& a, int64_t o, int64_t t0) {
    if (a.x2) {
      run_impl<R, T, true>(a, o, t0);
    } else {
      run_impl<R, T, false>(a, o, t0);
    }
  }

  // kX2: token t has activation rows 2t and 2t+1 (value and residual, each with its own
  // scale); each unpacked weight is dotted with both, each integer sum scaled on its own.
  template <int R, int T, bool kX2>
  static void run_impl(const TileArgs& a, int64_t o, int64_t t0) {
    constexpr int kRows = kX2 ? 2 : 1;  // activation rows per token
    constexpr int TT = T * kRows;       // activation rows of this tile
    const int64_t row0 = t0 * kRows;
    const int64_t nb = a.n_in / kQ8KBlock;
    const uint8_t* rows[R];
    for (int r = 0; r < R; ++r) rows[r] = a.w + (o + r) * a.row_bytes;  // [nb][kBytes]
    avx2::SpanPrefetcher pf(rows[0], R * a.row_bytes, nb, a.stream);  // one step per block
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i h16 = _mm512_set1_epi8(0x10);
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      float dw[R], dmin[R];
      __m512i sc[R];      // [sc0..sc7] int16 in the low 128 bits
      __m256i mins2[R];   // [m0, m0, m1, m1, ..., m7, m7] as int16
      __m512i qh[R];      // Q5_K: the 32 qh bytes, twice
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = rows[r] + b * kBytes;
        dw[r] = load_half(p);
        dmin[r] = load_half(p + 2);
        const __m128i sm = k4_scales_mins(p + 4);
        sc[r] = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        const __m128i m8 = _mm_unpackhi_epi64(sm, sm);
        mins2[r] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        if constexpr (kFive) qh[r] = _mm512_broadcast_i64x4(load256(p + 16));
      }
      float da[TT];
      __m512i isum[R][TT];
      for (int t = 0; t < TT; ++t) {
        da[t] = a.d[(row0 + t) * nb + b];
        const __m256i bs = load256(a.bsums + (row0 + t) * (a.n_in / kQ8KSub) + b * 16);
        for (int r = 0; r < R; ++r) {
          const __m256 m = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins2[r]));
          acc[r][t / kRows] = _mm512_fmadd_ps(_mm512_zextps256_ps512(m), _mm512_set1_ps(-dmin[r] * da[t]),
                                              acc[r][t / kRows]);
          isum[r][t] = _mm512_setzero_si512();
        }
      }
      for (int h = 0; h < 2; ++h) {
        __m512i lo[R], hi[R], slo[R], shi[R];
        for (int r = 0; r < R; ++r) {
          const __m512i qv = _mm512_loadu_si512(rows[r] + b * kBytes + kQsOff + 64 * h);
          lo[r] = _mm512_and_si512(qv, low4);
          hi[r] = _mm512_and_si512(_mm512_srli_epi16(qv, 4), low4);
          if constexpr (kFive) {
            // Sub-block j's fifth bit is bit j of qh[l].
            const __m512i blo = _mm512_inserti64x4(
                _mm512_set1_epi8(static_cast<char>(1 << (4 * h))),
                _mm256_set1_epi8(static_cast<char>(1 << (4 * h + 2))), 1);
            const __m512i bhi = _mm512_inserti64x4(
                _mm512_set1_epi8(static_cast<char>(1 << (4 * h + 1))),
                _mm256_set1_epi8(static_cast<char>(1 << (4 * h + 3))), 1);
            lo[r] = _mm512_mask_add_epi8(lo[r], _mm512_test_epi8_mask(qh[r], blo), lo[r], h16);
            hi[r] = _mm512_mask_add_epi8(hi[r], _mm512_test_epi8_mask(qh[r], bhi), hi[r], h16);
          }
          slo[r] = _mm512_permutexvar_epi16(halves_idx(4 * h, 4 * h + 2), sc[r]);
          shi[r] = _mm512_permutexvar_epi16(halves_idx(4 * h + 1, 4 * h + 3), sc[r]);
        }
        for (int t = 0; t < TT; ++t) {
          const int8_t* qa = a.qs + (row0 + t) * a.n_in + b * kQ8KBlock + 128 * h;
          const __m512i alo = load_split(qa);
          const __m512i ahi = load_split(qa + 32);
          for (int r = 0; r < R; ++r) {
            isum[r][t] = _mm512_dpwssd_epi32(isum[r][t], _mm512_maddubs_epi16(lo[r], alo), slo[r]);
            isum[r][t] = _mm512_dpwssd_epi32(isum[r][t], _mm512_maddubs_epi16(hi[r], ahi), shi[r]);
          }
        }
      }
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < TT; ++t)
          acc[r][t / kRows] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][t]), _mm512_set1_ps(dw[r] * da[t]),
                                              acc[r][t / kRows]);
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.n_out + o + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
};

struct Q6KKernel {
  template <int R, int T>
  static void run(const TileArgs& a, int64_t o, int64_t t0) {
    if (a.x2) {
      run_impl<R, T, true>(a, o, t0);
    } else {
      run_impl<R, T, false>(a, o, t0);
    }
  }

  // kX2: token t has activation rows 2t and 2t+1 (value and residual, each with its own
  // scale); each unpacked weight is dotted with both, each integer sum scaled on its own.
  template <int R, int T, bool kX2>
  static void run_impl(const TileArgs& a, int64_t o, int64_t t0) {
    constexpr int kRows = kX2 ? 2 : 1;  // activation rows per token
    constexpr int TT = T * kRows;       // activation rows of this tile
    const int64_t row0 = t0 * kRows;
    const int64_t nb = a.n_in / kQ8KBlock;
    const uint8_t* rows[R];
    for (int r = 0; r < R; ++r) rows[r] = a.w + (o + r) * a.row_bytes;  // [nb][210]
    avx2::SpanPrefetcher pf(rows[0], R * a.row_bytes, nb, a.stream);  // one step per block
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    // int16 lane i of a 64-weight register belongs to sub-block i / 8 (of 16 weights).
    const __m512i quarter = _mm512_srli_epi16(
        _mm512_setr_epi64(0x0003000200010000, 0x0007000600050004, 0x000b000a00090008,
                          0x000f000e000d000c, 0x0013001200110010, 0x0017001600150014,
                          0x001b001a00190018, 0x001f001e001d001c),
        3);
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      float dw[R];
      __m512i sc16[R];  // [16] sub-block scales as int16 in the low 256 bits
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = rows[r] + b * kQ6KBytes;
        dw[r] = load_half(p + 208);
        sc16[r] = _mm512_castsi256_si512(
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192))));
      }
      float da[TT];
      __m512i isum[R][TT];
      for (int t = 0; t < TT; ++t) {
        da[t] = a.d[(row0 + t) * nb + b];
        // The -32 offset: -32 * sum_j sc_j * bsum_j, seeded into the integer sum.
        const __m256i bs = load256(a.bsums + (row0 + t) * (a.n_in / kQ8KSub) + b * 16);
        for (int r = 0; r < R; ++r) {
          const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(bs, _mm512_castsi512_si256(sc16[r])), 5);
          isum[r][t] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), off));
        }
      }
      for (int half = 0; half < 2; ++half) {
        __m512i qlo[R], qhi[R], slo[R], shi[R];
        for (int r = 0; r < R; ++r) {
          const uint8_t* p = rows[r] + b * kQ6KBytes;
          const __m512i ql = _mm512_loadu_si512(p + 64 * half);  // low nibbles: 0..63, high: 64..127
          const __m256i qh = load256(p + 128 + 32 * half);
          // Elements 0-31 / 32-63 / 64-95 / 96-127 take qh bits 0-1 / 2-3 / 4-5 / 6-7 -> bits 4-5.
          const __m512i ha = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_slli_epi16(qh, 4)),
                                                _mm256_slli_epi16(qh, 2), 1);
          const __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
          // (x & 0x0f) | (h & 0x30)
          qlo[r] = _mm512_ternarylogic_epi32(ql, low4, _mm512_and_si512(ha, bits45), 0xea);
          qhi[r] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), low4,
                                             _mm512_and_si512(hb, bits45), 0xea);
          const __m512i base = _mm512_set1_epi16(static_cast<short>(8 * half));
          slo[r] = _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, base), sc16[r]);
          shi[r] = _mm512_permutexvar_epi16(
              _mm512_add_epi16(quarter, _mm512_add_epi16(base, _mm512_set1_epi16(4))), sc16[r]);
        }
        for (int t = 0; t < TT; ++t) {
          const int8_t* qa = a.qs + (row0 + t) * a.n_in + b * kQ8KBlock + 128 * half;
          const __m512i alo = _mm512_loadu_si512(qa);
          const __m512i ahi = _mm512_loadu_si512(qa + 64);
          for (int r = 0; r < R; ++r) {
            isum[r][t] = _mm512_dpwssd_epi32(isum[r][t], _mm512_maddubs_epi16(qlo[r], alo), slo[r]);
            isum[r][t] = _mm512_dpwssd_epi32(isum[r][t], _mm512_maddubs_epi16(qhi[r], ahi), shi[r]);
          }
        }
      }
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < TT; ++t)
          acc[r][t / kRows] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][t]), _mm512_set1_ps(dw[r] * da[t]),
                                              acc[r][t / kRows]);
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.n_out + o + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
};

}  // namespace

void fill_kernels_avx512_qk(KernelSet& ks) {
  ks.q4_k = run_tiles<Q45KKernel<false>, 4, 2, 4>;
  ks.q5_k = run_tiles<Q45KKernel<true>, 4, 2, 4>;
  ks.q6_k = run_tiles<Q6KKernel, 4, 2, 4>;
}

}  // namespace hs::cpu::detail
