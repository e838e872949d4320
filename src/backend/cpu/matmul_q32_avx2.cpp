// backend/cpu/matmul_q32_avx2.cpp — AVX2 kernels: activation quantizers, the 32-wide
// quant types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and the float types (F32, F16, BF16).
//
// 32-wide types: a micro-kernel computes R output rows x T tokens at once, walking the
// blocks in groups of 8. Per group it loads the 8 fp16 scales (and mins) of each row into
// one vector, multiplies by the 8 activation scales of each token (vectorized fp32 math,
// mins folded in as m * s with one FMA), and then per block does the integer dot of 32
// u8 weight quants and 32 s8 activation quants with maddubs + madd, scaled by one
// broadcast. Weight unpacking is paid once per (row, block) and shared by the T tokens;
// activation loads once per (token, block), shared by the R rows.
// kInt8x2 (TileArgs::x2): each unpacked block is also dotted with the residual row and
// the two integer sums combine exactly as 256 * dot1 + dot2 before the one fp32 FMA.
// Cost per (row, token, block): maddubs, madd, cvt, fma (+ abs/sign for Q8_0; x2 adds
// maddubs, madd, shift, add); per (row, block): 4-9 ops of unpacking. Matvec uses R=4,
// T=1; several tokens R=2, T<=4.
// GCC 12 cannot see that the vector stores into dd[][][] initialize the floats read back
// by broadcast, and warns "may be used uninitialized": a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstring>

#include "backend/cpu/matmul_avx2_common.h"
#include "backend/cpu/matmul_kernels.h"

namespace hs::cpu::detail {
namespace {


using avx2::hsum;
using avx2::run_tiles;

// ------------------------------------------------------------------ quantizers

// 32 floats -> 32 int8 quants (round half to even of x * id), returns their sum; with
// resid, also resid[j] = x[j] - d * q[j].
inline int quantize32(const float* x, float d, float id, int8_t* out, float* resid) {
  const __m256 vid = _mm256_set1_ps(id);
  __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), vid));
  __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid));
  __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid));
  __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid));
  if (resid) {
    // x - d * q as two roundings (no FMA), like the scalar reference.
    const __m256 vd = _mm256_set1_ps(d);
    const __m256i iv[4] = {i0, i1, i2, i3};
    for (int k = 0; k < 4; ++k) {
      const __m256 dq = _mm256_mul_ps(vd, _mm256_cvtepi32_ps(iv[k]));
      _mm256_storeu_ps(resid + 8 * k, _mm256_sub_ps(_mm256_loadu_ps(x + 8 * k), dq));
    }
  }
  const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
  auto clamp = [&](__m256i v) { return _mm256_max_epi32(nlim, _mm256_min_epi32(lim, v)); };
  i0 = clamp(i0);  // only residual rows can leave +-127
  i1 = clamp(i1);
  i2 = clamp(i2);
  i3 = clamp(i3);
  const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
  // packs works within 128-bit lanes: the dwords come out as elements
  // [0-3, 8-11, 16-19, 24-27 | 4-7, 12-15, 20-23, 28-31]; one permute restores the order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  const __m256i q = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), q);
  return avx2::hsum_i32(sum);
}

inline float absmax(const float* x, int n) {  // n a multiple of 8
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// Block scale and inverse: amax / 127, or parent / 256 for a residual row (exact).
inline void block_scale(const float* xb, int n, const float* parent_d, int64_t b, float& db, float& id) {
  if (parent_d != nullptr) {
    db = parent_d[b] * (1.0f / 256.0f);
    id = parent_d[b] != 0.0f ? 256.0f / parent_d[b] : 0.0f;
  } else {
    db = absmax(xb, n) / 127.0f;
    id = db != 0.0f ? 1.0f / db : 0.0f;
  }
}

void quantize_q8_avx2(const float* x, int64_t n_in, int8_t* qs, float* d, float* s, float* resid,
                      const float* parent_d) {
  for (int64_t b = 0; b < n_in / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;  // [32]
    float db, id;
    block_scale(xb, kQ8Block, parent_d, b, db, id);
    const int sum = quantize32(xb, db, id, qs + b * kQ8Block, resid ? resid + b * kQ8Block : nullptr);
    d[b] = db;
    s[b] = db * static_cast<float>(sum);
  }
}

void quantize_q8k_avx2(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums,
                       float* resid, const float* parent_d) {
  for (int64_t b = 0; b < n_in / kQ8KBlock; ++b) {
    const float* xb = x + b * kQ8KBlock;  // [256]
    float db, id;
    block_scale(xb, kQ8KBlock, parent_d, b, db, id);
    for (int g = 0; g < kQ8KBlock / kQ8KSub; g += 2) {
      int8_t* q = qs + b * kQ8KBlock + g * kQ8KSub;  // [32]
      quantize32(xb + g * kQ8KSub, db, id, q, resid ? resid + b * kQ8KBlock + g * kQ8KSub : nullptr);
      int s0 = 0, s1 = 0;
      for (int j = 0; j < kQ8KSub; ++j) {
        s0 += q[j];
        s1 += q[j + kQ8KSub];
      }
      bsums[b * 16 + g] = static_cast<int16_t>(s0);
      bsums[b * 16 + g + 1] = static_cast<int16_t>(s1);
    }
    d[b] = db;
  }
}

// ------------------------------------------------------------------ 32-wide weights

enum class MinMode { kNone, kStored, kOffset };

// 16 packed nibble bytes -> 32 bytes, low nibbles first.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// The 32 bits at qh -> 32 bytes holding 0x10 where the bit is set.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i v = _mm256_set1_epi32(static_cast<int>(bits));
  // Byte j takes byte j/8 of the word, then tests bit j%8.
  const __m256i spread = _mm256_shuffle_epi8(
      v, _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                            0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

struct Q4_0W {
  static constexpr int kBytes = 18;
  static constexpr MinMode kMin = MinMode::kOffset;
  static constexpr float kOffset = -8.0f;
  static __m256i unpack(const uint8_t* p) { return nibbles(p + 2); }
};
struct Q4_1W {
  static constexpr int kBytes = 20;
  static constexpr MinMode kMin = MinMode::kStored;
  static constexpr float kOffset = 0.0f;
  static __m256i unpack(const uint8_t* p) { return nibbles(p + 4); }
};
struct Q5_0W {
  static constexpr int kBytes = 22;
  static constexpr MinMode kMin = MinMode::kOffset;
  static constexpr float kOffset = -16.0f;
  static __m256i unpack(const uint8_t* p) { return _mm256_or_si256(nibbles(p + 6), fifth_bits(p + 2)); }
};
struct Q5_1W {
  static constexpr int kBytes = 24;
  static constexpr MinMode kMin = MinMode::kStored;
  static constexpr float kOffset = 0.0f;
  static __m256i unpack(const uint8_t* p) { return _mm256_or_si256(nibbles(p + 8), fifth_bits(p + 4)); }
};
struct Q8_0W {
  static constexpr int kBytes = 34;
  static constexpr MinMode kMin = MinMode::kNone;
  static constexpr float kOffset = 0.0f;
  static __m256i unpack(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
  }
};

// 8 x int32 partial sums of u[i] * a[i] (u unsigned, a signed; or both signed for Q8_0).
template <class W>
inline __m256i dot32(__m256i w, __m256i a) {
  if constexpr (W::kMin == MinMode::kNone) {
    // maddubs wants an unsigned operand: |w| times a carrying w's sign.
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)),
                             _mm256_set1_epi16(1));
  } else {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
  }
}

inline int32_t load_i32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The first 4 bytes of n <= 8 consecutive blocks of kBytes (zero past n). Scalar loads, not
// a gather: a gather that misses the cache stalls the pipeline on these CPUs. A short group
// reads past its row into the next one (masked off after) unless that would leave the
// weight at `end`.
template <int kBytes>
inline __m256i block_heads(const uint8_t* p, int n, const uint8_t* end, __m256i lane_ok) {
  if (n == 8 || p + 7 * kBytes + 4 <= end) {
    const __m256i v = _mm256_setr_epi32(load_i32(p), load_i32(p + kBytes), load_i32(p + 2 * kBytes),
                                        load_i32(p + 3 * kBytes), load_i32(p + 4 * kBytes),
                                        load_i32(p + 5 * kBytes), load_i32(p + 6 * kBytes),
                                        load_i32(p + 7 * kBytes));
    return n == 8 ? v : _mm256_and_si256(v, lane_ok);
  }
  alignas(32) int32_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; k < n; ++k) v[k] = load_i32(p + k * kBytes);
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(v));
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
  // the integer dot is 256 * dot(w, q1) + dot(w, q2), exact in int32 (|lane| < 2^25).
  template <int R, int T, bool kX2>
  static void run_impl(const TileArgs& a, int64_t o, int64_t t0) {
    const int64_t nb = a.n_in / kQ8Block;
    constexpr int64_t kRows = kX2 ? 2 : 1;  // activation rows per token
    const uint8_t* rows[R];
    for (int r = 0; r < R; ++r) rows[r] = a.w + (o + r) * a.row_bytes;  // [nb][kBytes]
    avx2::SpanPrefetcher pf(rows[0], R * a.row_bytes, nb, a.stream);  // one step per block
    const uint8_t* w_end = a.w + a.n_out * a.row_bytes;
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    alignas(32) float dd[R][T][8];  // per group: dw * da of each block (written by vector stores)
    for (int64_t g = 0; g < nb; g += 8) {
      const int n = nb - g < 8 ? static_cast<int>(nb - g) : 8;
      const __m256i lane_ok =
          _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      __m256 dw[R], mw[R];
      for (int r = 0; r < R; ++r) {
        // The first 32 bits of each block: fp16 d in the low half, fp16 m (if any) in the high.
        const __m256i raw = block_heads<W::kBytes>(rows[r] + g * W::kBytes, n, w_end, lane_ok);
        const __m256i lo = _mm256_and_si256(raw, _mm256_set1_epi32(0xffff));
        const __m256i hi = _mm256_srli_epi32(raw, 16);
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        dw[r] = _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
        if constexpr (W::kMin == MinMode::kStored) {
          mw[r] = _mm256_cvtph_ps(_mm256_extracti128_si256(packed, 1));
        } else {
          mw[r] = _mm256_mul_ps(dw[r], _mm256_set1_ps(W::kOffset));
        }
      }
      for (int t = 0; t < T; ++t) {
        const int64_t base = (t0 + t) * kRows * nb + g;  // row 2t (x2) or t
        // The combined dot's scale: d of the last row (d1 / 256 for x2).
        const __m256 da = _mm256_maskload_ps(a.d + base + (kRows - 1) * nb, lane_ok);
        for (int r = 0; r < R; ++r) _mm256_store_ps(dd[r][t], _mm256_mul_ps(dw[r], da));
        if constexpr (W::kMin != MinMode::kNone) {
          __m256 sa = _mm256_maskload_ps(a.s + base, lane_ok);
          if constexpr (kX2) sa = _mm256_add_ps(sa, _mm256_maskload_ps(a.s + base + nb, lane_ok));
          for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(mw[r], sa, acc[r][t]);
        }
      }
      for (int k = 0; k < n; ++k) {
        __m256i q[R];
        for (int r = 0; r < R; ++r) q[r] = W::unpack(rows[r] + (g + k) * W::kBytes);
        pf.step();
        for (int t = 0; t < T; ++t) {
          const int8_t* ap = a.qs + (t0 + t) * kRows * a.n_in + (g + k) * kQ8Block;
          const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap));
          __m256i av2 = av;
          if constexpr (kX2) av2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ap + a.n_in));
          for (int r = 0; r < R; ++r) {
            __m256i isum = dot32<W>(q[r], av);
            if constexpr (kX2) isum = _mm256_add_epi32(_mm256_slli_epi32(isum, 8), dot32<W>(q[r], av2));
            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dd[r][t][k]), acc[r][t]);
          }
        }
      }
    }
    for (int t = 0; t < T; ++t)
      for (int r = 0; r < R; ++r) a.y[(t0 + t) * a.n_out + o + r] = hsum(acc[r][t]);
  }
};

// ------------------------------------------------------------------ float weights

struct F32W {
  static __m256 load8(const uint8_t* row, int64_t i) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  }
  static float load1(const uint8_t* row, int64_t i) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  }
};
struct F16W {
  static __m256 load8(const uint8_t* row, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  }
  static float load1(const uint8_t* row, int64_t i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return _cvtsh_ss(h);
  }
};
struct BF16W {
  static __m256 load8(const uint8_t* row, int64_t i) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float load1(const uint8_t* row, int64_t i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

template <class W>
struct FloatKernel {
  template <int R, int T>
  static void run(const TileArgs& a, int64_t o, int64_t t0) {
    const uint8_t* rows[R];
    for (int r = 0; r < R; ++r) rows[r] = a.w + (o + r) * a.row_bytes;
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= a.n_in; i += 8) {
      __m256 w[R];
      for (int r = 0; r < R; ++r) w[r] = W::load8(rows[r], i);
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_loadu_ps(a.x + (t0 + t) * a.n_in + i);
        for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], xv, acc[r][t]);
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) {
        float sum = hsum(acc[r][t]);
        for (int64_t j = i; j < a.n_in; ++j) sum += W::load1(rows[r], j) * a.x[(t0 + t) * a.n_in + j];
        a.y[(t0 + t) * a.n_out + o + r] = sum;
      }
    }
  }
};

}  // namespace

void fill_kernels_avx2_q32(KernelSet& ks) {
  ks.quantize_q8 = quantize_q8_avx2;
  ks.quantize_q8k = quantize_q8k_avx2;
  ks.q4_0 = run_tiles<Q32Kernel<Q4_0W>>;
  ks.q4_1 = run_tiles<Q32Kernel<Q4_1W>>;
  ks.q5_0 = run_tiles<Q32Kernel<Q5_0W>>;
  ks.q5_1 = run_tiles<Q32Kernel<Q5_1W>>;
  ks.q8_0 = run_tiles<Q32Kernel<Q8_0W>>;
  ks.f32 = run_tiles<FloatKernel<F32W>>;
  ks.f16 = run_tiles<FloatKernel<F16W>>;
  ks.bf16 = run_tiles<FloatKernel<BF16W>>;
}

}  // namespace hs::cpu::detail
