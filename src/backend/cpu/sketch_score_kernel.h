// backend/cpu/sketch_score_kernel.h — the sketch scoring loops, written once and compiled per
// ISA (sketch_score.cpp baseline, sketch_score_avx2.cpp, sketch_score_avx512.cpp). Included
// only by those files; everything has internal linkage (see simd_math.h for why).
// Layout and math: sketch_score.h.
#pragma once

#include <cmath>
#include <cstring>

#include "backend/cpu/simd_math.h"
#include "backend/cpu/sketch_score.h"

namespace hs::cpu::detail {
namespace {

constexpr int kSketchMaxPage = 256;  // page_tokens upper bound (scores scratch per page)
constexpr int kMaxRank = 1024;
constexpr int kPrefetchPages = 4;  // how far ahead the next head blocks are fetched

// Any P: one token at a time, decoded to floats (sketch_decode).
void score_run_scalar(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, const uint8_t* blk,
                      int lane_begin, int n, float* out) {
  const int r = v.rank;
  float s[kMaxRank];
  for (int j = 0; j < n; ++j) {
    sketch_decode(v.elem, blk, r, v.page_tokens, lane_begin + j, s);
    float best = -INFINITY;
    for (int g = 0; g < n_q; ++g) {
      float dot = bias[g];
      for (int d = 0; d < r; ++d) dot += q_hat[g * r + d] * s[d];
      best = dot > best ? dot : best;
    }
    out[j] = best;
  }
}

template <SketchElem E>
[[gnu::always_inline]] inline v16f load_lanes(const uint8_t* p) {
  if constexpr (E == SketchElem::kF32) return load_v16(reinterpret_cast<const float*>(p));
  else if constexpr (E == SketchElem::kF16) return load_v16(reinterpret_cast<const _Float16*>(p));
  else return load_i8x16(p);
}
template <SketchElem E>
constexpr int elem_bytes() {
  return E == SketchElem::kF32 ? 4 : E == SketchElem::kF16 ? 2 : 1;
}

// The scores of 16 consecutive tokens (lanes l0 .. l0+15 of head block `blk`) for G query
// heads (G = 0: any n_q, one head at a time): max_g (bias_g + scale · Σ_d q̂_g[d] · x_d).
template <SketchElem E, int G>
[[gnu::always_inline]] inline v16f score_lanes(const float* q_hat, const float* bias, int n_q, int R, const uint8_t* blk, int P, int l0) {
  constexpr int eb = elem_bytes<E>();
  const uint8_t* col = blk + static_cast<int64_t>(l0) * eb;  // dimension d at col + d·P·eb
  const int64_t stride = static_cast<int64_t>(P) * eb;
  v16f scale;
  if constexpr (E == SketchElem::kInt8)
    scale = load_v16(reinterpret_cast<const _Float16*>(blk + static_cast<int64_t>(R) * P + 2 * l0));
  v16f best = v16f{} - INFINITY;
  if constexpr (G > 0) {
    // KS partial sums per head break the FMA dependency chain over d (latency 4, not 1/2).
    constexpr int KS = G <= 3 ? 4 : G == 4 ? 3 : G <= 6 ? 2 : 1;
    v16f acc[G][KS];
    for (int g = 0; g < G; ++g)
      for (int k = 0; k < KS; ++k) acc[g][k] = v16f{};
    int d = 0;
    for (; d + KS <= R; d += KS)
      for (int k = 0; k < KS; ++k) {
        const v16f x = load_lanes<E>(col + (d + k) * stride);
        for (int g = 0; g < G; ++g) acc[g][k] += q_hat[g * R + d + k] * x;
      }
    for (; d < R; ++d) {
      const v16f x = load_lanes<E>(col + d * stride);
      for (int g = 0; g < G; ++g) acc[g][0] += q_hat[g * R + d] * x;
    }
    for (int g = 0; g < G; ++g) {
      v16f a = acc[g][0];
      for (int k = 1; k < KS; ++k) a += acc[g][k];
      v16f sc;
      if constexpr (E == SketchElem::kInt8) sc = a * scale + bias[g];
      else sc = a + bias[g];
      best = sc > best ? sc : best;
    }
  } else {
    for (int g = 0; g < n_q; ++g) {
      v16f acc = v16f{};
      for (int d = 0; d < R; ++d) acc += q_hat[g * R + d] * load_lanes<E>(col + d * stride);
      v16f sc;
      if constexpr (E == SketchElem::kInt8) sc = acc * scale + bias[g];
      else sc = acc + bias[g];
      best = sc > best ? sc : best;
    }
  }
  return best;
}

// Calls fn(pos, n, blk, lane_begin) for each page run [pos, pos + n) of [begin, end), with the
// head block of its page; pages are scattered, so the block kPrefetchPages pages ahead is
// fetched first.
template <typename F>
[[gnu::always_inline]] inline void for_each_page_run(const PagedSketchView& v, int kv_head, int32_t begin,
                                                     int32_t end, F&& fn) {
  const int P = v.page_tokens;
  const int lines = static_cast<int>((sketch_head_bytes(v.elem, v.rank, P) + 63) / 64);
  for (int32_t pos = begin; pos < end;) {
    const int32_t page_end = (pos / P + 1) * P;
    const int32_t run_end = end < page_end ? end : page_end;
    const int32_t ahead = pos + kPrefetchPages * P;
    if (ahead < end) {
      const uint8_t* next = v.head_block(ahead, kv_head);
      for (int line = 0; line < lines && line < 64; ++line) __builtin_prefetch(next + 64 * line);
    }
    fn(pos, run_end - pos, v.head_block(pos, kv_head), pos % P);
    pos = run_end;
  }
}

// Calls fn(pos, n, scores) for each page run of [begin, end) with the run's scores.
template <SketchElem E, int G, typename F>
void for_each_run_t(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                    int32_t begin, int32_t end, F&& fn) {
  const int P = v.page_tokens, R = v.rank;
  float buf[kSketchMaxPage];
  for_each_page_run(v, kv_head, begin, end, [&](int32_t pos, int n, const uint8_t* blk, int lane_begin) {
    if (P % 16 == 0) {
      for (int l0 = lane_begin & ~15; l0 < lane_begin + n; l0 += 16)
        store_v16(buf + l0, score_lanes<E, G>(q_hat, bias, n_q, R, blk, P, l0));
      fn(pos, n, buf + lane_begin);
    } else {
      score_run_scalar(q_hat, bias, n_q, v, blk, lane_begin, n, buf);
      fn(pos, n, buf);
    }
  });
}

// Dispatch on the group size (1..8 unrolled; more: one head at a time), then the element type.
template <SketchElem E, typename F>
void for_each_run_e(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                    int32_t begin, int32_t end, F&& fn) {
  switch (n_q) {
    case 1: return for_each_run_t<E, 1>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    case 2: return for_each_run_t<E, 2>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    case 3: return for_each_run_t<E, 3>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    case 4: return for_each_run_t<E, 4>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    case 5: return for_each_run_t<E, 5>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    case 6: return for_each_run_t<E, 6>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    case 7: return for_each_run_t<E, 7>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    case 8: return for_each_run_t<E, 8>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    default: return for_each_run_t<E, 0>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
  }
}

template <typename F>
void for_each_run(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                  int32_t begin, int32_t end, F&& fn) {
  switch (v.elem) {
    case SketchElem::kF32: return for_each_run_e<SketchElem::kF32>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    case SketchElem::kF16: return for_each_run_e<SketchElem::kF16>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
    case SketchElem::kInt8: return for_each_run_e<SketchElem::kInt8>(q_hat, bias, n_q, v, kv_head, begin, end, fn);
  }
}

// Calls fn(pos, n, scores, stride) for each page run of [begin, end): scores[g · stride + j]
// is head g's own score of token pos + j (no max over the group). Every head is scored while
// the page's block is in L1, so the sketches are read from memory once for the whole group.
template <SketchElem E, typename F>
void for_each_run_heads_t(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                          int32_t begin, int32_t end, float* buf /*[n_q][kSketchMaxPage]*/, F&& fn) {
  const int P = v.page_tokens, R = v.rank;
  for_each_page_run(v, kv_head, begin, end, [&](int32_t pos, int n, const uint8_t* blk, int lane_begin) {
    for (int g = 0; g < n_q; ++g) {
      float* out = buf + static_cast<int64_t>(g) * kSketchMaxPage;
      const float* qg = q_hat + static_cast<int64_t>(g) * R;
      if (P % 16 == 0) {
        for (int l0 = lane_begin & ~15; l0 < lane_begin + n; l0 += 16)
          store_v16(out + l0, score_lanes<E, 1>(qg, bias + g, 1, R, blk, P, l0));
      } else {
        score_run_scalar(qg, bias + g, 1, v, blk, lane_begin, n, out + lane_begin);
      }
    }
    fn(pos, n, buf + lane_begin, kSketchMaxPage);
  });
}

template <typename F>
void for_each_run_heads(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                        int32_t begin, int32_t end, float* buf, F&& fn) {
  switch (v.elem) {
    case SketchElem::kF32: return for_each_run_heads_t<SketchElem::kF32>(q_hat, bias, n_q, v, kv_head, begin, end, buf, fn);
    case SketchElem::kF16: return for_each_run_heads_t<SketchElem::kF16>(q_hat, bias, n_q, v, kv_head, begin, end, buf, fn);
    case SketchElem::kInt8: return for_each_run_heads_t<SketchElem::kInt8>(q_hat, bias, n_q, v, kv_head, begin, end, buf, fn);
  }
}

void sketch_score_impl(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                       int32_t begin, int32_t end, float* scores) {
  for_each_run(q_hat, bias, n_q, v, kv_head, begin, end, [&](int32_t pos, int n, const float* s) {
    std::memcpy(scores + (pos - begin), s, sizeof(float) * n);
  });
}

void sketch_chunk_max_impl(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                           int32_t n_tokens, int C, int32_t chunk_begin, int32_t chunk_end, float* chunk_max) {
  for (int32_t c = chunk_begin; c < chunk_end; ++c) chunk_max[c - chunk_begin] = -INFINITY;
  const int32_t begin = chunk_begin * C;
  const int32_t end = static_cast<int32_t>(static_cast<int64_t>(chunk_end) * C < n_tokens ? chunk_end * C : n_tokens);
  if (begin >= end) return;
  for_each_run(q_hat, bias, n_q, v, kv_head, begin, end, [&](int32_t pos, int n, const float* s) {
    // A run starts on a chunk boundary (C divides P); chunks of the run are whole but the last.
    for (int j0 = 0; j0 < n; j0 += C) {
      const int m = n - j0 < C ? n - j0 : C;
      float mx = -INFINITY;
      for (int j = 0; j < m; ++j) mx = s[j0 + j] > mx ? s[j0 + j] : mx;
      chunk_max[(pos + j0) / C - chunk_begin] = mx;
    }
  });
}

// out [chunk_end - chunk_begin][n_q]: per query head g, log Σ_{t in chunk} exp(α · score_g(t))
// with score_g(t) = bias_g + q̂_g · s_t (no max over the group).
void sketch_chunk_head_mass_impl(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v,
                                 int kv_head, int32_t n_tokens, int C, int32_t chunk_begin, int32_t chunk_end,
                                 float alpha, float* out) {
  const int32_t begin = chunk_begin * C;
  const int32_t end = static_cast<int32_t>(static_cast<int64_t>(chunk_end) * C < n_tokens ? chunk_end * C : n_tokens);
  for (int64_t i = 0; i < static_cast<int64_t>(chunk_end - chunk_begin) * n_q; ++i) out[i] = -INFINITY;
  if (begin >= end) return;
  constexpr int kMaxHeads = 128;
  static thread_local float buf[kMaxHeads * kSketchMaxPage];  // [n_q][P] one page's scores per head
  for (int g0 = 0; g0 < n_q; g0 += kMaxHeads) {
    const int ng = n_q - g0 < kMaxHeads ? n_q - g0 : kMaxHeads;
    for_each_run_heads(q_hat + static_cast<int64_t>(g0) * v.rank, bias + g0, ng, v, kv_head, begin, end, buf,
                       [&](int32_t pos, int n, const float* s, int stride) {
                         // A run starts on a chunk boundary (C divides P); chunks are whole but the
                         // last. Per head one max and one vector exp over the run, then per-chunk
                         // sums (several chunks per run when C < P). A chunk more than 87 nats
                         // under the run's max reads as e^-87 per token (exp_nonpositive's floor):
                         // never one a budget would pick over the chunks near the max.
                         float e[kSketchMaxPage];
                         for (int g = 0; g < ng; ++g) {
                           const float* sg = s + static_cast<int64_t>(g) * stride;
                           float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
                           for (int j = 0; j < n; ++j) mx = sg[j] > mx ? sg[j] : mx;
#pragma omp simd
                           for (int j = 0; j < n; ++j) e[j] = exp_nonpositive((sg[j] - mx) * alpha);
                           for (int j0 = 0; j0 < n; j0 += C) {
                             const int m = n - j0 < C ? n - j0 : C;
                             float sum = 0.0f;
                             for (int j = 0; j < m; ++j) sum += e[j0 + j];
                             out[static_cast<int64_t>((pos + j0) / C - chunk_begin) * n_q + g0 + g] =
                                 mx * alpha + fast_log(sum);
                           }
                         }
                       });
  }
}

}  // namespace
}  // namespace hs::cpu::detail
