// backend/cuda/sparse_rows.cuh — what the selection kernels (sparse_select.cu) and the top-k
// kernels (sparse_topk.cu) share about a row (one (token, kv head) of a sparse step): its
// candidate range and budget (RowRule, the CPU selector's rule), the exact rerank's entries (the
// listed chunks, then the forced sinks and window) and its group-mass ranking (rank_list, which
// rerank_rank_kernel runs alone and the final top-k runs inside its own block). Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/sparse_kernels.h"

namespace hs::cuda {

constexpr int kMaxGroup = 8;  // query heads a kv head (the selection's G)

// The candidate chunks [first, last) and the budget rule of sparse/selector.cpp.
struct RowRule {
  int32_t n_tokens, n_chunks, first, last, k;
  bool all;  // every candidate fits: all selected, nothing scored
};
__device__ __forceinline__ RowRule row_rule(const SelectRule& r, int32_t n_tokens) {
  RowRule o;
  const int C = r.chunk_tokens;
  o.n_tokens = n_tokens;
  o.n_chunks = (n_tokens + C - 1) / C;
  o.first = min(o.n_chunks, r.sink_chunks);
  const int32_t wb = r.window_tokens > 0 ? max(0, n_tokens - r.window_tokens) / C : o.n_chunks;
  o.last = max(o.first, wb);
  const int64_t cand_tokens = min(static_cast<int64_t>(o.last) * C, static_cast<int64_t>(n_tokens)) -
                              static_cast<int64_t>(o.first) * C;
  const int32_t n_cand = o.last - o.first;
  const int32_t budget_chunks = r.budget_tokens / C;
  o.all = cand_tokens <= r.budget_tokens || n_cand <= budget_chunks;
  o.k = o.all ? n_cand : budget_chunks;
  return o;
}

// A row's rerank entries: its n_list listed chunks, then the forced ones (sinks, window).
__device__ __forceinline__ int32_t rerank_entries(const RowRule& rr, int32_t n_list) {
  return n_list + rr.first + (rr.n_chunks - rr.last);
}

// Entry e of a row's rerank: list[e] for e < n_list, then the forced chunks (sinks 0..first-1,
// then the window last..n_chunks-1).
__device__ __forceinline__ int32_t rerank_chunk(const RowRule& rr, const int32_t* list, int32_t n_list, int32_t e) {
  if (e < n_list) return list[e];
  const int32_t f = e - n_list;
  return f < rr.first ? f : rr.last + (f - rr.first);
}

// (m, s) pairs of a log-sum-exp (value m + log s), merged: either may be empty (m = -inf).
__device__ __forceinline__ void lse_merge(float& m, float& s, float om, float os) {
  const float hi = fmaxf(m, om);
  s = hi > -INFINITY ? s * expf(m - hi) + os * expf(om - hi) : 0.0f;
  m = hi;
}

// A row's group-mass ranking (exact_rerank.h; ascending g, as the CPU's group_mass_ranking):
// lse_g over the row's entries (list and forced) in one pass (threads 0..255 each a running
// (max, sum) per head over entries tid, tid + 256, ..., merged across the warp by shuffles and
// across the 8 warps through shared memory, in that order whatever the block size), then
// list_scores[e] = sum_g exp(L_ge - lse_g) for the listed chunks. Every thread of the block calls
// it (blockDim >= 256, a multiple of 32; it has block barriers); the row is a sparse one whose
// candidates do not all fit (rr.all false).
constexpr int kRankThreads = 256;
__device__ __forceinline__ void rank_list(const SelectArgs& a, int64_t row, const RowRule& rr, int32_t n_list) {
  constexpr int kWarps = kRankThreads / 32;
  __shared__ float wm[kWarps][kMaxGroup], ws[kWarps][kMaxGroup];
  __shared__ float lse[kMaxGroup];
  const int32_t n_ent = rerank_entries(rr, n_list);
  const int G = a.group;
  const float* m = a.mass + row * (a.shortlist + a.rule.max_selected) * G;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x < kRankThreads) {  // warp-uniform
    float mx[kMaxGroup], sm[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      mx[g] = -INFINITY;
      sm[g] = 0.0f;
    }
    for (int32_t e = threadIdx.x; e < n_ent; e += kRankThreads)
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < G) lse_merge(mx[g], sm[g], m[e * G + g], 1.0f);
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= G) break;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, mx[g], off), os = __shfl_xor_sync(0xffffffffu, sm[g], off);
        lse_merge(mx[g], sm[g], om, os);
      }
      if (lane == 0) {
        wm[warp][g] = mx[g];
        ws[warp][g] = sm[g];
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float hm = -INFINITY, hs = 0.0f;
    for (int w = 0; w < kWarps; ++w) lse_merge(hm, hs, wm[w][g], ws[w][g]);
    lse[g] = hm > -INFINITY ? hm + logf(hs) : -INFINITY;
  }
  __syncthreads();
  for (int32_t e = threadIdx.x; e < n_list; e += blockDim.x) {
    float r = 0.0f;
    for (int g = 0; g < G; ++g) r += lse[g] > -INFINITY ? expf(m[e * G + g] - lse[g]) : 0.0f;
    a.list_scores[row * a.shortlist + e] = r;
  }
  __syncthreads();  // the scores are read by other threads of the block next (the fused top-k)
}

}  // namespace hs::cuda
