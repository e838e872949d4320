// backend/cpu/attention_kernel.h — the attention inner loop, written once and compiled per
// ISA (attention.cpp baseline, attention_avx2.cpp, attention_avx512.cpp) so `omp simd`
// loops vectorize with that ISA's registers. Included only by those files.
#pragma once

#include <cmath>
#include <cstring>

#include <immintrin.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/simd_math.h"

namespace hs::cpu::detail {
// Internal linkage: each ISA's file gets its own copy (an inline function shared across
// files compiled with different -m flags could be linked to the wrong ISA's body). For the
// same reason the kernel calls no inline library templates (std::max, std::fill).
namespace {

constexpr int kMaxGroup = 16;   // query heads per kv head handled in one pass
constexpr int kMaxPage = 64;    // page_tokens upper bound (scores scratch per page)

// Scores of one page run of n keys (K|V rows interleaved, K first): s[g][j] = scale * q_g · k_j.
template <typename T>
void score_run(const float* q, int n_q, const T* rows, int n, int hd, float scale, float (*s)[kMaxPage]) {
  for (int j = 0; j < n; ++j) {
    const T* k = rows + static_cast<int64_t>(j) * 2 * hd;
    for (int g = 0; g < n_q; ++g) {
      const float* qg = q + g * hd;
      float dot = 0.0f;
      if (hd % 16 == 0) {
        v16f acc = {};
        for (int d = 0; d < hd; d += 16) acc += load_v16(qg + d) * load_v16(k + d);
        dot = hsum_v16(acc);
      } else {
        for (int d = 0; d < hd; ++d) dot += qg[d] * static_cast<float>(k[d]);
      }
      s[g][j] = dot * scale;
    }
  }
}

template <typename T>  // float or _Float16
void attention_partial_t(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin, int32_t end,
                         float scale, AttnPartial part) {
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
    const T* rows = static_cast<const T*>(kv.layer_base) + static_cast<int64_t>(kv.blocks[pos / P]) * kv.page_elems +
                    (static_cast<int64_t>(kv_head) * P + pos % P) * 2 * hd;
    score_run(q, n_q, rows, n, hd, scale, s);  // s[g][j] = scale * q_g · k_j
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
        const T* v = rows + static_cast<int64_t>(j) * 2 * hd + hd;
        if (hd % 16 == 0) {
          for (int d = 0; d < hd; d += 16) store_v16(acc + d, load_v16(acc + d) + p * load_v16(v + d));
        } else {
          for (int d = 0; d < hd; ++d) acc[d] += p * static_cast<float>(v[d]);
        }
      }
      part.max[g] = run_max;
      part.sum[g] = sum;
    }
    pos = run_end;
  }
}

// The same computation with head_dim = 16·NV known at compile time: each K and V row is
// loaded (and converted from f16) once per key for the whole GQA group, and the group's
// running outputs stay in vector registers (spilling to L1 for large groups × head_dim).
template <typename T, int NV>
void attention_partial_fixed(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin,
                             int32_t end, float scale, AttnPartial part) {
  constexpr int hd = 16 * NV;
  const int P = kv.page_tokens;
  v16f qv[kMaxGroup][NV];
  v16f acc[kMaxGroup][NV];
  float mx[kMaxGroup], sm[kMaxGroup];
  for (int g = 0; g < n_q; ++g) {
    for (int i = 0; i < NV; ++i) {
      qv[g][i] = load_v16(q + g * hd + 16 * i) * scale;
      acc[g][i] = v16f{};
    }
    mx[g] = -INFINITY;
    sm[g] = 0.0f;
  }
  float s[kMaxGroup][kMaxPage];
  for (int32_t pos = begin; pos < end;) {
    const int32_t page_end = (pos / P + 1) * P;
    const int32_t run_end = end < page_end ? end : page_end;
    const int n = run_end - pos;
    const T* rows = static_cast<const T*>(kv.layer_base) + static_cast<int64_t>(kv.blocks[pos / P]) * kv.page_elems +
                    (static_cast<int64_t>(kv_head) * P + pos % P) * 2 * hd;
    if (run_end < end) {  // next page's rows for this head: start fetching them now
      const T* next = static_cast<const T*>(kv.layer_base) +
                      static_cast<int64_t>(kv.blocks[run_end / P]) * kv.page_elems +
                      static_cast<int64_t>(kv_head) * P * 2 * hd;
      for (int line = 0; line < 8; ++line) __builtin_prefetch(reinterpret_cast<const char*>(next) + 64 * line);
    }
    for (int j = 0; j < n; ++j) {
      const T* k = rows + static_cast<int64_t>(j) * 2 * hd;
      v16f kr[NV];
      for (int i = 0; i < NV; ++i) kr[i] = load_v16(k + 16 * i);
      for (int g = 0; g < n_q; ++g) {
        v16f a = qv[g][0] * kr[0];
        for (int i = 1; i < NV; ++i) a += qv[g][i] * kr[i];
        s[g][j] = hsum_v16(a);
      }
    }
    for (int g = 0; g < n_q; ++g) {
      float run_max = mx[g];
      for (int j = 0; j < n; ++j) run_max = s[g][j] > run_max ? s[g][j] : run_max;
      const float correction = mx[g] == -INFINITY ? 0.0f : exp_nonpositive(mx[g] - run_max);
      if (correction != 1.0f)
        for (int i = 0; i < NV; ++i) acc[g][i] *= correction;
      float sum = sm[g] * correction;
      float* sg = s[g];
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j < n; ++j) {
        sg[j] = exp_nonpositive(sg[j] - run_max);
        sum += sg[j];
      }
      mx[g] = run_max;
      sm[g] = sum;
    }
    for (int j = 0; j < n; ++j) {
      const T* v = rows + static_cast<int64_t>(j) * 2 * hd + hd;
      v16f vr[NV];
      for (int i = 0; i < NV; ++i) vr[i] = load_v16(v + 16 * i);
      for (int g = 0; g < n_q; ++g) {
        const float p = s[g][j];
        for (int i = 0; i < NV; ++i) acc[g][i] += p * vr[i];
      }
    }
    pos = run_end;
  }
  for (int g = 0; g < n_q; ++g) {
    part.max[g] = mx[g];
    part.sum[g] = sm[g];
    for (int i = 0; i < NV; ++i) store_v16(part.acc + g * hd + 16 * i, acc[g][i]);
  }
}

template <typename T>
void attention_partial_dispatch(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin,
                                int32_t end, float scale, AttnPartial part) {
  if (n_q <= kMaxGroup && kv.page_tokens <= kMaxPage) {
    switch (kv.head_dim) {
      case 64: return attention_partial_fixed<T, 4>(q, n_q, kv, kv_head, begin, end, scale, part);
      case 128: return attention_partial_fixed<T, 8>(q, n_q, kv, kv_head, begin, end, scale, part);
      case 256: return attention_partial_fixed<T, 16>(q, n_q, kv, kv_head, begin, end, scale, part);
      default: break;
    }
  }
  attention_partial_t<T>(q, n_q, kv, kv_head, begin, end, scale, part);
}

void attention_partial_impl(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin, int32_t end,
                            float scale, AttnPartial part) {
  if (kv.f16)
    attention_partial_dispatch<_Float16>(q, n_q, kv, kv_head, begin, end, scale, part);
  else
    attention_partial_dispatch<float>(q, n_q, kv, kv_head, begin, end, scale, part);
}

// out[t] = scale · q · k_t for keys [0, n_tokens) of one query head (the recall measurement's
// exact logits). One page run at a time through score_run.
template <typename T>
void key_scores_t(const float* q, const PagedKvView& kv, int kv_head, int32_t n_tokens, float scale, float* out) {
  const int P = kv.page_tokens, hd = kv.head_dim;
  float s[kMaxGroup][kMaxPage];
  for (int32_t pos = 0; pos < n_tokens;) {
    const int32_t run_end = (pos / P + 1) * P < n_tokens ? (pos / P + 1) * P : n_tokens;
    const int n = run_end - pos;
    const T* rows = static_cast<const T*>(kv.layer_base) + static_cast<int64_t>(kv.blocks[pos / P]) * kv.page_elems +
                    (static_cast<int64_t>(kv_head) * P + pos % P) * 2 * hd;
    score_run(q, 1, rows, n, hd, scale, s);
    for (int j = 0; j < n; ++j) out[pos + j] = s[0][j];
    pos = run_end;
  }
}

// Requires page_tokens <= kMaxPage (checked by the caller, key_scores).
void key_scores_impl(const float* q, const PagedKvView& kv, int kv_head, int32_t n_tokens, float scale, float* out) {
  if (kv.f16)
    key_scores_t<_Float16>(q, kv, kv_head, n_tokens, scale, out);
  else
    key_scores_t<float>(q, kv, kv_head, n_tokens, scale, out);
}

// Log softmax mass of whole chunks from the keys alone: out[i][g] = log Σ_{t∈chunk i}
// exp(scale · q_g·k_t) (chunk i = tokens [c·C, min(n_tokens, (c+1)·C)) of chunk id c = ids[i],
// one page run since C divides P; -inf if empty). K rows only: no V read, no output.
// NV > 0: head_dim = 16·NV at compile time (q in registers); NV = 0: any head_dim.
template <typename T, int NV>
void chunk_log_mass_t(const float* q, int n_q, const PagedKvView& kv, int kv_head, const int32_t* ids, int n_ids,
                      int C, int32_t n_tokens, float scale, float* out) {
  const int P = kv.page_tokens, hd = NV > 0 ? 16 * NV : kv.head_dim;
  float s[kMaxGroup][kMaxPage];
  int i = 0;
  while (i < n_ids) {
    const int32_t b = ids[i] * C;
    if (b >= n_tokens) {
      for (int g = 0; g < n_q; ++g) out[static_cast<int64_t>(i) * n_q + g] = -INFINITY;
      ++i;
      continue;
    }
    // One run: chunks i..j-1 with consecutive ids in the same page (their key rows are
    // contiguous), scored together; each chunk's log mass from its slice of the run.
    int j = i + 1;
    while (j < n_ids && ids[j] == ids[j - 1] + 1 && (ids[j] * C) / P == b / P && ids[j] * C < n_tokens) ++j;
    const int32_t e_full = (ids[j - 1] + 1) * C, e = e_full < n_tokens ? e_full : n_tokens;
    const int n = e - b;
    const T* rows = static_cast<const T*>(kv.layer_base) + static_cast<int64_t>(kv.blocks[b / P]) * kv.page_elems +
                    (static_cast<int64_t>(kv_head) * P + b % P) * 2 * hd;
    if (j < n_ids && ids[j] * C < n_tokens) {  // the next run's first key rows
      const int32_t nb = ids[j] * C;
      const T* next = static_cast<const T*>(kv.layer_base) + static_cast<int64_t>(kv.blocks[nb / P]) * kv.page_elems +
                      (static_cast<int64_t>(kv_head) * P + nb % P) * 2 * hd;
      for (int line = 0; line < 4; ++line) __builtin_prefetch(reinterpret_cast<const char*>(next) + 64 * line);
    }
    score_run(q, n_q, rows, n, hd, scale, s);
    for (int k = i; k < j; ++k) {
      const int j0 = (k - i) * C, m = n - j0 < C ? n - j0 : C;
      float* o = out + static_cast<int64_t>(k) * n_q;
      for (int g = 0; g < n_q; ++g) {
        const float* sg = s[g] + j0;
        float mx = sg[0];
        for (int t = 1; t < m; ++t) mx = sg[t] > mx ? sg[t] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int t = 0; t < m; ++t) sum += exp_nonpositive(sg[t] - mx);
        o[g] = mx + fast_log(sum);  // sum in [1, C]
      }
    }
    i = j;
  }
}

template <typename T>
void chunk_log_mass_dispatch(const float* q, int n_q, const PagedKvView& kv, int kv_head, const int32_t* ids,
                             int n_ids, int C, int32_t n_tokens, float scale, float* out) {
  switch (kv.head_dim) {
    case 64: return chunk_log_mass_t<T, 4>(q, n_q, kv, kv_head, ids, n_ids, C, n_tokens, scale, out);
    case 128: return chunk_log_mass_t<T, 8>(q, n_q, kv, kv_head, ids, n_ids, C, n_tokens, scale, out);
    case 256: return chunk_log_mass_t<T, 16>(q, n_q, kv, kv_head, ids, n_ids, C, n_tokens, scale, out);
    default: return chunk_log_mass_t<T, 0>(q, n_q, kv, kv_head, ids, n_ids, C, n_tokens, scale, out);
  }
}

// Requires n_q <= kMaxGroup and C <= kMaxPage (checked by the caller, chunk_log_mass).
void chunk_log_mass_impl(const float* q, int n_q, const PagedKvView& kv, int kv_head, const int32_t* ids, int n_ids,
                         int C, int32_t n_tokens, float scale, float* out) {
  if (kv.f16)
    chunk_log_mass_dispatch<_Float16>(q, n_q, kv, kv_head, ids, n_ids, C, n_tokens, scale, out);
  else
    chunk_log_mass_dispatch<float>(q, n_q, kv, kv_head, ids, n_ids, C, n_tokens, scale, out);
}

}  // namespace
}  // namespace hs::cpu::detail
