// backend/cpu/sketch_score_kernel.h — the sketch scoring loops, written once and compiled per
// ISA (sketch_score.cpp baseline, sketch_score_avx2.cpp, sketch_score_avx512.cpp). Included
// only by those files; everything has internal linkage (see simd_math.h for why).
#pragma once

#include <cmath>
#include <cstring>

#include "backend/cpu/simd_math.h"
#include "backend/cpu/sketch_score.h"

namespace hs::cpu::detail {
namespace {

constexpr int kSketchMaxPage = 256;  // page_tokens upper bound (scores scratch per page)

// out[j] = sum of the 16 lanes of a[j], for j < 16: a 16x16 transpose-add tree
// (15 adds and 30 shuffles for 16 horizontal sums instead of 16 separate reductions).
v16f hsum16x16(const v16f* a) {
  v16f t[8], u[4], w[2];
  for (int k = 0; k < 8; ++k) {
    const v16f x = a[2 * k], y = a[2 * k + 1];
    t[k] = __builtin_shufflevector(x, y, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(x, y, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  }
  for (int k = 0; k < 4; ++k) {
    const v16f x = t[2 * k], y = t[2 * k + 1];
    u[k] = __builtin_shufflevector(x, y, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
           __builtin_shufflevector(x, y, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  }
  for (int k = 0; k < 2; ++k) {
    const v16f x = u[2 * k], y = u[2 * k + 1];
    w[k] = __builtin_shufflevector(x, y, 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
           __builtin_shufflevector(x, y, 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  }
  return __builtin_shufflevector(w[0], w[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         __builtin_shufflevector(w[0], w[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}

// rows [n][16·NV] (contiguous sketches of n tokens) -> out [n]: max_g (bias_g + q̂_g · s_j).
template <typename T, int NV>
void score_rows_fixed(const float* q_hat, const float* bias, int n_q, const T* rows, int n, float* out) {
  constexpr int R = 16 * NV;
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int m = n - j0 < 16 ? n - j0 : 16;
    v16f s[16][NV];  // the block's rows as floats, zero past m
    for (int j = 0; j < 16; ++j)
      for (int i = 0; i < NV; ++i) s[j][i] = j < m ? load_v16(rows + static_cast<int64_t>(j0 + j) * R + 16 * i) : v16f{};
    v16f best = v16f{} - INFINITY;
    for (int g = 0; g < n_q; ++g) {
      v16f qv[NV];
      for (int i = 0; i < NV; ++i) qv[i] = load_v16(q_hat + g * R + 16 * i);
      v16f a[16];
      for (int j = 0; j < 16; ++j) {
        v16f acc = qv[0] * s[j][0];
        for (int i = 1; i < NV; ++i) acc += qv[i] * s[j][i];
        a[j] = acc;
      }
      const v16f sc = hsum16x16(a) + bias[g];
      best = sc > best ? sc : best;
    }
    float tmp[16];
    store_v16(tmp, best);
    for (int j = 0; j < m; ++j) out[j0 + j] = tmp[j];
  }
}

// Any rank: one dot per (token, head).
template <typename T>
void score_rows_generic(const float* q_hat, const float* bias, int n_q, const T* rows, int n, int rank, float* out) {
  for (int j = 0; j < n; ++j) {
    const T* s = rows + static_cast<int64_t>(j) * rank;
    float best = -INFINITY;
    for (int g = 0; g < n_q; ++g) {
      const float* qg = q_hat + g * rank;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int i = 0; i < rank; ++i) dot += qg[i] * static_cast<float>(s[i]);
      dot += bias[g];
      best = dot > best ? dot : best;
    }
    out[j] = best;
  }
}

template <typename T>
void score_rows(const float* q_hat, const float* bias, int n_q, const T* rows, int n, int rank, float* out) {
  switch (rank) {
    case 16: return score_rows_fixed<T, 1>(q_hat, bias, n_q, rows, n, out);
    case 32: return score_rows_fixed<T, 2>(q_hat, bias, n_q, rows, n, out);
    case 64: return score_rows_fixed<T, 4>(q_hat, bias, n_q, rows, n, out);
    case 128: return score_rows_fixed<T, 8>(q_hat, bias, n_q, rows, n, out);
    default: return score_rows_generic<T>(q_hat, bias, n_q, rows, n, rank, out);
  }
}

// Calls fn(pos, n, scores) for each page run of [begin, end) with the run's scores.
template <typename T, typename F>
void for_each_run(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                  int32_t begin, int32_t end, F&& fn) {
  const int P = v.page_tokens, r = v.rank;
  float buf[kSketchMaxPage];
  for (int32_t pos = begin; pos < end;) {
    const int32_t page_end = (pos / P + 1) * P;
    const int32_t run_end = end < page_end ? end : page_end;
    const T* rows = static_cast<const T*>(v.layer_base) + static_cast<int64_t>(v.blocks[pos / P]) * v.page_elems +
                    (static_cast<int64_t>(kv_head) * P + pos % P) * r;
    if (run_end < end) {  // the next page's rows for this head: start fetching them now
      const char* next = reinterpret_cast<const char*>(static_cast<const T*>(v.layer_base) +
                                                       static_cast<int64_t>(v.blocks[run_end / P]) * v.page_elems +
                                                       static_cast<int64_t>(kv_head) * P * r);
      const int lines = static_cast<int>((static_cast<int64_t>(P) * r * sizeof(T) + 63) / 64);
      for (int line = 0; line < lines && line < 32; ++line) __builtin_prefetch(next + 64 * line);
    }
    score_rows<T>(q_hat, bias, n_q, rows, run_end - pos, r, buf);
    fn(pos, run_end - pos, buf);
    pos = run_end;
  }
}

template <typename T>
void sketch_score_t(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                    int32_t begin, int32_t end, float* scores) {
  for_each_run<T>(q_hat, bias, n_q, v, kv_head, begin, end, [&](int32_t pos, int n, const float* s) {
    std::memcpy(scores + (pos - begin), s, sizeof(float) * n);
  });
}

template <typename T>
void sketch_chunk_max_t(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                        int32_t n_tokens, int C, int32_t chunk_begin, int32_t chunk_end, float* chunk_max) {
  for (int32_t c = chunk_begin; c < chunk_end; ++c) chunk_max[c - chunk_begin] = -INFINITY;
  const int32_t begin = chunk_begin * C;
  const int32_t end = static_cast<int32_t>(static_cast<int64_t>(chunk_end) * C < n_tokens ? chunk_end * C : n_tokens);
  if (begin >= end) return;
  for_each_run<T>(q_hat, bias, n_q, v, kv_head, begin, end, [&](int32_t pos, int n, const float* s) {
    // A run starts on a chunk boundary (C divides P); chunks of the run are whole but the last.
    for (int j0 = 0; j0 < n; j0 += C) {
      const int m = n - j0 < C ? n - j0 : C;
      float mx = -INFINITY;
      for (int j = 0; j < m; ++j) mx = s[j0 + j] > mx ? s[j0 + j] : mx;
      chunk_max[(pos + j0) / C - chunk_begin] = mx;
    }
  });
}

void sketch_score_impl(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                       int32_t begin, int32_t end, float* scores) {
  if (v.f16)
    sketch_score_t<_Float16>(q_hat, bias, n_q, v, kv_head, begin, end, scores);
  else
    sketch_score_t<float>(q_hat, bias, n_q, v, kv_head, begin, end, scores);
}

void sketch_chunk_max_impl(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                           int32_t n_tokens, int C, int32_t chunk_begin, int32_t chunk_end, float* chunk_max) {
  if (v.f16)
    sketch_chunk_max_t<_Float16>(q_hat, bias, n_q, v, kv_head, n_tokens, C, chunk_begin, chunk_end, chunk_max);
  else
    sketch_chunk_max_t<float>(q_hat, bias, n_q, v, kv_head, n_tokens, C, chunk_begin, chunk_end, chunk_max);
}

}  // namespace
}  // namespace hs::cpu::detail
