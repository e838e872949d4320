// backend/cpu/matmul_qk_avx2.cpp — AVX2 kernels for the K-quants (Q4_K, Q5_K, Q6_K) against
// Q8_K activations (256-element blocks, fp32 scale, 16-element sums).
//
// Per (row, super-block) the 6-bit (Q4_K/Q5_K) or 8-bit (Q6_K) sub-block scales are
// expanded once into int16 broadcasts; per token, each 32 weights x 32 activations go
// through maddubs (u8 x s8 -> pairs of int16) and madd with the sub-block scale (-> int32),
// accumulated exactly over the super-block; one fp32 FMA per (row, token, super-block)
// applies d * da. Mins (Q4_K/Q5_K) and the -32 offset of Q6_K come from the activation's
// bsums with one madd. Cost per (row, token, 256 elements): ~29 vector ops; per (row,
// super-block): ~30 ops of unpacking, shared by the tokens of a tile. kInt8x2 dots each
// unpacked weight with the value and the residual row and scales the two int32 sums
// separately (combining them in int32 could overflow with 6-bit scales). Matvec R=2, T=1;
// several tokens R=1, T<=4 (AVX2 has 16 registers).
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/matmul_avx2_common.h"
#include "backend/cpu/matmul_kernels.h"

namespace hs::cpu::detail {
namespace {

using avx2::hsum;
using avx2::run_tiles;

constexpr int kQ4KBytes = 144;
constexpr int kQ5KBytes = 176;
constexpr int kQ6KBytes = 210;

inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 12 packed scale bytes of a Q4_K / Q5_K block -> 16 bytes [sc0..sc7, m0..m7].
// Bytes 0-3 hold sc0-3 (low 6 bits), bytes 4-7 m0-3; their top 2 bits are the high bits
// of sc4-7 / m4-7, whose low nibbles are in bytes 8-11 (sc low nibble, m high nibble).
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

// int16 broadcast of word j of each 128-bit lane.
inline __m256i word_bcast(__m256i v, int j) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * j)));
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// ------------------------------------------------------------------ Q4_K / Q5_K

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
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      float dw[R], dmin[R];
      __m256i scales[R];  // [sc0..sc7] as int16, in both lanes
      __m256i mins2[R];   // [m0, m0, m1, m1, ..., m7, m7] as int16
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = rows[r] + b * kBytes;
        dw[r] = load_half(p);
        dmin[r] = load_half(p + 2);
        const __m128i sm = k4_scales_mins(p + 4);
        scales[r] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        const __m128i m8 = _mm_unpackhi_epi64(sm, sm);
        mins2[r] = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
      }
      float da[TT];
      for (int t = 0; t < TT; ++t) {
        da[t] = a.d[(row0 + t) * nb + b];
        const __m256i bs = load256(a.bsums + (row0 + t) * (a.n_in / kQ8KSub) + b * 16);
        for (int r = 0; r < R; ++r) {
          const __m256 m = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins2[r]));
          acc[r][t / kRows] = _mm256_fmadd_ps(m, _mm256_set1_ps(-dmin[r] * da[t]), acc[r][t / kRows]);
        }
      }
      __m256i isum[R][TT];
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < TT; ++t) isum[r][t] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {  // 64 elements: sub-blocks 2c (low nibbles), 2c+1 (high)
        __m256i lo[R], hi[R], slo[R], shi[R];
        for (int r = 0; r < R; ++r) {
          const uint8_t* p = rows[r] + b * kBytes;
          const __m256i qv = load256(p + kQsOff + 32 * c);
          lo[r] = _mm256_and_si256(qv, low4);
          hi[r] = _mm256_and_si256(_mm256_srli_epi16(qv, 4), low4);
          if constexpr (kFive) {
            // Bit j of qh[l] is the 5th bit of element l of sub-block j; move it to bit 4.
            const __m256i qh = load256(p + 16);
            const __m256i h16 = _mm256_set1_epi8(0x10);
            const int j0 = 2 * c, j1 = 2 * c + 1;
            const __m256i h0 = j0 <= 4 ? _mm256_slli_epi16(qh, 4 - j0) : _mm256_srli_epi16(qh, j0 - 4);
            const __m256i h1 = j1 <= 4 ? _mm256_slli_epi16(qh, 4 - j1) : _mm256_srli_epi16(qh, j1 - 4);
            lo[r] = _mm256_or_si256(lo[r], _mm256_and_si256(h0, h16));
            hi[r] = _mm256_or_si256(hi[r], _mm256_and_si256(h1, h16));
          }
          slo[r] = word_bcast(scales[r], 2 * c);
          shi[r] = word_bcast(scales[r], 2 * c + 1);
        }
        for (int t = 0; t < TT; ++t) {
          const int8_t* qa = a.qs + (row0 + t) * a.n_in + b * kQ8KBlock + 64 * c;
          const __m256i alo = load256(qa);
          const __m256i ahi = load256(qa + 32);
          for (int r = 0; r < R; ++r) {
            const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], alo), slo[r]);
            const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], ahi), shi[r]);
            isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_add_epi32(p0, p1));
          }
        }
      }
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < TT; ++t)
          acc[r][t / kRows] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]), _mm256_set1_ps(dw[r] * da[t]),
                                              acc[r][t / kRows]);
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.n_out + o + r] = hsum(acc[r][t]);
  }
};

// ------------------------------------------------------------------ Q6_K

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
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    // Within each 128-bit lane, repeat word 0 (low lane) / word 1 (high lane).
    const __m256i pair_bcast = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                                2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    for (int64_t b = 0; b < nb; ++b) {
      pf.step();
      float dw[R];
      __m256i sc16[R];  // [16] sub-block scales as int16
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = rows[r] + b * kQ6KBytes;
        dw[r] = load_half(p + 208);
        sc16[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)));
      }
      __m256i isum[R][TT];
      float da[TT];
      for (int t = 0; t < TT; ++t) {
        da[t] = a.d[(row0 + t) * nb + b];
        // The -32 offset: -32 * sum_j sc_j * bsum_j, seeded into the integer sum.
        const __m256i bs = load256(a.bsums + (row0 + t) * (a.n_in / kQ8KSub) + b * 16);
        for (int r = 0; r < R; ++r)
          isum[r][t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                        _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16[r]), 5));
      }
      for (int half = 0; half < 2; ++half) {
        for (int part = 0; part < 2; ++part) {  // ql[32*part ..], elements 32*part and 64+32*part
          __m256i q_lo[R], q_hi[R], s_lo[R], s_hi[R];
          for (int r = 0; r < R; ++r) {
            const uint8_t* p = rows[r] + b * kQ6KBytes;
            const __m256i ql = load256(p + 64 * half + 32 * part);
            const __m256i qh = load256(p + 128 + 32 * half);
            // Elements 32*part + l take qh bits (2*part, 2*part+1); 64 + 32*part + l take
            // bits (4 + 2*part, 5 + 2*part); move them to bits 4-5.
            const __m256i h_lo = part == 0 ? _mm256_slli_epi16(qh, 4) : _mm256_slli_epi16(qh, 2);
            const __m256i h_hi = part == 0 ? qh : _mm256_srli_epi16(qh, 2);
            q_lo[r] = _mm256_or_si256(_mm256_and_si256(ql, low4), _mm256_and_si256(h_lo, bits45));
            q_hi[r] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, 4), low4),
                                      _mm256_and_si256(h_hi, bits45));
            // Sub-blocks of 16: elements 128*half + 32*part -> index 8*half + 2*part (+1),
            // elements 128*half + 64 + 32*part -> 8*half + 4 + 2*part (+1).
            const int j_lo = 8 * half + 2 * part, j_hi = j_lo + 4;
            s_lo[r] = _mm256_shuffle_epi8(
                _mm256_permutevar8x32_epi32(sc16[r], _mm256_set1_epi32(j_lo / 2)), pair_bcast);
            s_hi[r] = _mm256_shuffle_epi8(
                _mm256_permutevar8x32_epi32(sc16[r], _mm256_set1_epi32(j_hi / 2)), pair_bcast);
          }
          for (int t = 0; t < TT; ++t) {
            const int8_t* qa = a.qs + (row0 + t) * a.n_in + b * kQ8KBlock + 128 * half + 32 * part;
            const __m256i alo = load256(qa);
            const __m256i ahi = load256(qa + 64);
            for (int r = 0; r < R; ++r) {
              const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q_lo[r], alo), s_lo[r]);
              const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q_hi[r], ahi), s_hi[r]);
              isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_add_epi32(p0, p1));
            }
          }
        }
      }
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < TT; ++t)
          acc[r][t / kRows] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]), _mm256_set1_ps(dw[r] * da[t]),
                                              acc[r][t / kRows]);
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.n_out + o + r] = hsum(acc[r][t]);
  }
};

}  // namespace

void fill_kernels_avx2_qk(KernelSet& ks) {
  ks.q4_k = run_tiles<Q45KKernel<false>, 2, 1, 4>;
  ks.q5_k = run_tiles<Q45KKernel<true>, 2, 1, 4>;
  ks.q6_k = run_tiles<Q6KKernel, 2, 1, 4>;
}

}  // namespace hs::cpu::detail
