// backend/cpu/matmul_avx2_common.h — helpers shared by the AVX2 and AVX-512 matmul kernel
// files: horizontal sums and the loop that cuts a tile into micro-kernel calls.
//
// Include only from *_avx2.cpp / *_avx512.cpp files. Everything here has internal linkage
// (an unnamed namespace), so each translation unit keeps its own copy compiled with its
// own ISA flags and the linker can never swap an AVX-512 copy into an AVX2 caller.
// Cost: the tile loop is a few branches per micro-kernel call.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/matmul_kernels.h"

namespace hs::cpu::detail::avx2 {
namespace {

inline float hsum(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

inline int hsum_i32(__m256i v) {
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  return _mm_cvtsi128_si32(h);
}

// Matvec prefetching: while a micro-kernel reads its R rows (one contiguous span of
// R * row_bytes), it prefetches the span the same size kPrefetchBytes (or more, in whole
// spans) further on, spread evenly over its n_steps calls of step(): every line is
// covered exactly once and the addresses ascend (measured: prefetching block by block left
// about one line per row to a demand miss and cost ~25% of the DRAM bandwidth).
inline constexpr int64_t kPrefetchBytes = 16384;

class SpanPrefetcher {
 public:
  SpanPrefetcher(const uint8_t* span, int64_t span_bytes, int64_t n_steps, bool enabled) {
    if (!enabled || n_steps <= 0) return;
    const int64_t n_spans = (kPrefetchBytes + span_bytes - 1) / span_bytes;
    const uint8_t* begin = span + n_spans * span_bytes;
    next_ = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(begin) & ~uintptr_t{63});
    end_ = begin + span_bytes;
    per_step_ = ((end_ - next_) / n_steps + 64) & ~int64_t{63};
  }
  void step() {
    const uint8_t* lim = end_ - next_ > per_step_ ? next_ + per_step_ : end_;
    for (; next_ < lim; next_ += 64) _mm_prefetch(reinterpret_cast<const char*>(next_), _MM_HINT_T0);
  }

 private:
  const uint8_t* next_ = nullptr;
  const uint8_t* end_ = nullptr;
  int64_t per_step_ = 0;
};

// K::run<R, T> for a runtime token count nt in [1, kTokens].
template <class K, int R, int kTokens>
inline void run_tokens(const TileArgs& a, int64_t o, int64_t t, int64_t nt) {
  if constexpr (kTokens > 1) {
    if (nt >= kTokens) return K::template run<R, kTokens>(a, o, t);
    return run_tokens<K, R, kTokens - 1>(a, o, t, nt);
  } else {
    K::template run<R, 1>(a, o, t);
  }
}

// Covers rows [r0, r1) x tokens [t0, t1) with K::run<R, T>(args, row, token) calls:
// a single token uses R = kRowsOne, several tokens R = kRowsMany and up to kTokens (<= 8) tokens
// per call (the tile's weight rows are re-read from cache once per kTokens tokens).
template <class K, int kRowsOne = 4, int kRowsMany = 2, int kTokens = 4>
void run_tiles(const TileArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  static_assert(kTokens >= 1 && kTokens <= 8);
  if (t1 - t0 == 1) {
    int64_t o = r0;
    for (; o + kRowsOne <= r1; o += kRowsOne) K::template run<kRowsOne, 1>(a, o, t0);
    for (; o < r1; ++o) K::template run<1, 1>(a, o, t0);
    return;
  }
  for (int64_t t = t0; t < t1; t += kTokens) {
    const int64_t nt = t1 - t < kTokens ? t1 - t : kTokens;
    int64_t o = r0;
    for (; o + kRowsMany <= r1; o += kRowsMany) run_tokens<K, kRowsMany, kTokens>(a, o, t, nt);
    for (; o < r1; ++o) run_tokens<K, 1, kTokens>(a, o, t, nt);
  }
}

}  // namespace
}  // namespace hs::cpu::detail::avx2
