// backend/cuda/sparse_topk.cu — the sparse selection's top-k kernels (sparse_topk.h).
//
// Both pick a row's best k keys by a 4-pass 8-bit radix select over order-preserving uint32 keys
// of the scores (NaN as −inf): each pass histograms the keys that match the prefix so far (lanes
// of a warp with the same bin add once), a warp scans the 256 bins from the top and narrows the
// prefix to the bin holding the k-th key. The winners are every key above the threshold T and
// the last `need` of the ties at T (ties prefer the later chunk, as the CPU), placed in
// ascending order by block scans of each thread's contiguous run.
// topk_kernel: one CTA of 1024 threads a row; the selection (sinks + winners + window, their
// pages and the key count) or a list. shortlist_kernel: a cluster of up to 8 CTAs a row, each a
// segment of the row's keys, the histograms summed through distributed shared memory.
// Cost: a row's keys read 6 times (shared memory when they fit, else L2); 4 block or cluster
// barriers per pass.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/smem_limit.h"
#include "backend/cuda/sparse_rows.cuh"
#include "backend/cuda/sparse_topk.h"

namespace hs::cuda {
namespace {

constexpr int kTopkThreads = 1024;
constexpr size_t kTopkSmemBytes = 160 * 1024;

// Order-preserving key of a score: larger float, larger key; NaN ranks as -inf.
__device__ __forceinline__ uint32_t order_key(float s) {
  if (s != s) s = -INFINITY;
  if (s == 0.0f) s = 0.0f;  // -0 ties with +0, as on the CPU
  const uint32_t u = __float_as_uint(s);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// ---- radix select (the top-k kernels) ---------------------------------------------------------

// One radix pass's histogram: every key c < n with (key & mask) == prefix adds to hist[(key >> shift)
// & 255]. Lanes of a warp with the same bin add once (ties, even all-equal scores, cost one shared
// atomic per warp and iteration, not 32). Every thread of the block calls it (kThreads of them).
template <int kThreads, typename KeyAt>
__device__ __forceinline__ void radix_count(int* hist, int32_t n, const KeyAt& key_at, uint32_t mask, uint32_t prefix,
                                            int shift) {
  const int32_t n_iter = (n + kThreads - 1) / kThreads * kThreads;
  for (int32_t c = threadIdx.x; c < n_iter; c += kThreads) {
    uint32_t bin = 256;  // none
    if (c < n) {
      const uint32_t key = key_at(c);
      if ((key & mask) == prefix) bin = (key >> shift) & 255u;
    }
    const unsigned peers = __match_any_sync(0xffffffffu, bin);
    if (bin < 256 && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
  }
}

// After a pass's histogram: warp 0 finds the bin holding the *s_need-th largest key (lane l holds
// bins 255 - 8l .. 248 - 8l, descending) and narrows *s_prefix / *s_need to it. Threads of other
// warps return at once; the caller's barrier publishes the result.
__device__ __forceinline__ void radix_pick(const int* hist, uint32_t prefix, int shift, uint32_t* s_prefix,
                                           int* s_need) {
  const int lane = threadIdx.x;
  if (lane >= 32) return;
  const int rem = *s_need;
  int v[8], sum = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    v[e] = hist[255 - 8 * lane - e];
    sum += v[e];
  }
  int incl = sum;  // inclusive prefix over lanes (higher bins first)
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int o = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += o;
  }
  const int excl = incl - sum;
  const unsigned hit = __ballot_sync(0xffffffffu, excl < rem && incl >= rem);
  if (lane == __ffs(hit) - 1) {
    int cum = excl;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (cum + v[e] >= rem) {
        *s_prefix = prefix | (static_cast<uint32_t>(255 - 8 * lane - e) << shift);
        *s_need = rem - cum;
        break;
      }
      cum += v[e];
    }
  }
}

// After the select (threshold key T, the last `need` of the ties at T win): thread tid's
// contiguous run [s0, s1) of n keys, its keys above T (gt) and at T (eq), and those of the
// threads before it (block exclusive scans). Every thread of the block calls it (it has a
// barrier); count false: nothing counted (all zero).
struct WinnerRun {
  int32_t s0, s1;
  int gt, eq, gt_before, eq_before;
};
template <int kThreads, typename KeyAt>
__device__ __forceinline__ WinnerRun winner_run(int32_t n, bool count, const KeyAt& key_at, uint32_t T,
                                                typename cub::BlockScan<int, kThreads>::TempStorage& tmp) {
  using Scan = cub::BlockScan<int, kThreads>;
  WinnerRun w;
  const int32_t run = (n + kThreads - 1) / kThreads;
  w.s0 = min(n, static_cast<int32_t>(threadIdx.x) * run);
  w.s1 = min(n, w.s0 + run);
  w.gt = w.eq = 0;
  if (count)
    for (int32_t c = w.s0; c < w.s1; ++c) {
      const uint32_t key = key_at(c);
      w.gt += key > T;
      w.eq += key == T;
    }
  Scan(tmp).ExclusiveSum(w.gt, w.gt_before);
  __syncthreads();
  Scan(tmp).ExclusiveSum(w.eq, w.eq_before);
  return w;
}

// The run's winners in candidate order: emit(slot, c) with slots from `out` on. ties_before:
// the ties at T before the run (over every key, not just the block's); eq_total: all ties.
template <typename KeyAt, typename Emit>
__device__ __forceinline__ void emit_winners(const WinnerRun& w, const KeyAt& key_at, uint32_t T, int need,
                                             int ties_before, int eq_total, int out, const Emit& emit) {
  int e = ties_before;
  for (int32_t c = w.s0; c < w.s1; ++c) {
    const uint32_t key = key_at(c);
    bool win = key > T;
    if (key == T) win = e++ >= eq_total - need;
    if (win) emit(out++, c);
  }
}

// kShared: the row's keys are first copied into dynamic shared memory (score_stride of them), so
// the four radix passes and the two output passes read shared memory, not L2.
// kMode: kTopkFlat, the selection from every candidate's score; kTopkFromList, the selection
// from the list's token scores (a.list_scores), chunk list[c] for entry c.
// kTopkListToList: the best a.shortlist2 of the list's token scores into a.list2 (ascending;
// the whole list when it has no more). kTopkRankFromList: kTopkFromList after computing the
// list's scores itself (rank_list, bit for bit rerank_rank_kernel's): one launch fewer a layer.
// (The shortlist's top-k over every candidate is shortlist_kernel's, below: a cluster a row.)
template <bool kShared, int kMode>
__global__ void __launch_bounds__(kTopkThreads) topk_kernel(StepTables t, SelectArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ uint32_t skeys[];
  using Scan = cub::BlockScan<int, kTopkThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  __shared__ int s_eq_total;
  const int64_t row = blockIdx.x;
  const int64_t i = row / a.n_kv_heads;
  const int tid = threadIdx.x;
  const int cap = a.rule.max_selected;
  int32_t* chunks = a.sel_chunks + row * cap;
  int32_t* pages_out = a.sel_pages + row * cap;
  constexpr bool kToList = kMode == kTopkListToList;  // writes a list, not a selection
  if (!a.sparse_tok[i]) {
    if (tid == 0 && !kToList) a.sel_len[row] = -1;
    return;
  }
  RowRule rr = row_rule(a.rule, t.positions[i] + 1);
  const int32_t* pages = t.page_indices + t.page_indptr[t.seq_index[i]];
  const int C = a.rule.chunk_tokens;
  int32_t* list = a.list + row * a.shortlist;  // kTopkFromList / kTopkListToList
  int32_t* list2 = a.list2 + row * a.shortlist2;  // kTopkListToList
  if constexpr (kMode == kTopkListToList) {
    const int32_t n = rr.all ? 0 : a.n_list[row];
    if (n <= a.shortlist2) {  // the whole list (nothing when every candidate fits)
      for (int32_t c = tid; c < n; c += kTopkThreads) list2[c] = list[c];
      if (tid == 0) a.n_list2[row] = n;
      return;
    }
    rr.k = a.shortlist2;
  }
  // Candidates c in [0, n_cand): chunk rr.first + c, or list[c] (from the list, unless all fit).
  const bool from_list =
      (kMode == kTopkFromList || kMode == kTopkListToList || kMode == kTopkRankFromList) && !rr.all;
  const int32_t n_cand = from_list ? a.n_list[row] : rr.last - rr.first;
  if constexpr (kMode == kTopkRankFromList) {
    if (!rr.all) rank_list(a, row, rr, n_cand);  // block-uniform; it ends with a barrier
  }
  const float* sc = from_list ? a.list_scores + row * a.shortlist : a.scores + row * a.score_stride;
  auto chunk_of = [&](int32_t c) { return from_list ? list[c] : rr.first + c; };
  if (kShared && !rr.all) {
    for (int32_t c = tid; c < n_cand; c += kTopkThreads) skeys[c] = order_key(sc[c]);
    __syncthreads();
  }
  auto key_at = [&](int32_t c) { return kShared ? skeys[c] : order_key(sc[c]); };
  // Which candidates win: all (rr.all), else key > T, or key == T among the last `need` ties.
  uint32_t T = 0xffffffffu;  // above every key (k == 0: no candidate wins)
  int need = 0;
  if (!rr.all && rr.k > 0) {
    if (tid == 0) {
      s_prefix = 0;
      s_need = rr.k;
    }
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kTopkThreads) hist[b] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix;
      radix_count<kTopkThreads>(hist, n_cand, key_at, mask, prefix, shift);
      __syncthreads();
      radix_pick(hist, prefix, shift, &s_prefix, &s_need);
      mask |= 255u << shift;
      __syncthreads();
    }
    T = s_prefix;
    need = s_need;
  }
  // Per-thread contiguous runs of the candidates, scanned for the output positions.
  const WinnerRun w = winner_run<kTopkThreads>(n_cand, !rr.all, key_at, T, scan_tmp);
  if (tid == kTopkThreads - 1) s_eq_total = w.eq_before + w.eq;
  __syncthreads();
  const int eq_total = s_eq_total;
  // Winners before this thread's run: every one above T, and the winning ties among its ties.
  const int won_before = w.gt_before + max(0, w.eq_before - (eq_total - need));
  if constexpr (kToList) {  // the winners' chunk ids, ascending
    emit_winners(w, key_at, T, need, w.eq_before, eq_total, won_before,
                 [&](int slot, int32_t c) { list2[slot] = chunk_of(c); });
    if (tid == 0) a.n_list2[row] = rr.k;
    return;
  }
  const int32_t n_win = rr.all ? n_cand : rr.k;
  const int32_t n_sel = rr.first + n_win + (rr.n_chunks - rr.last);
  auto put = [&](int32_t slot, int32_t c) {
    if (slot < cap) {
      chunks[slot] = c;
      pages_out[slot] = pages[c];
    }
  };
  // Sinks and window.
  for (int32_t c = tid; c < rr.first; c += kTopkThreads) put(c, c);
  for (int32_t c = rr.last + tid; c < rr.n_chunks; c += kTopkThreads) put(rr.first + n_win + (c - rr.last), c);
  // Candidates, ascending.
  if (rr.all) {
    for (int32_t c = tid; c < n_cand; c += kTopkThreads) put(rr.first + c, rr.first + c);
  } else {
    emit_winners(w, key_at, T, need, w.eq_before, eq_total, rr.first + won_before,
                 [&](int slot, int32_t c) { put(slot, chunk_of(c)); });
  }
  for (int32_t slot = n_sel + tid; slot < cap; slot += kTopkThreads) {
    chunks[slot] = -1;
    pages_out[slot] = 0;
  }
  if (tid == 0) {
    // Every chunk but the context's last is full; the last is always in (window) unless the
    // window is off and it lost as a candidate.
    const bool last_in = rr.last < rr.n_chunks || rr.all || (n_cand > 0 && [&] {
                           const uint32_t key = key_at(n_cand - 1);
                           return key > T || (key == T && need > 0);  // the last tie is the latest chunk
                         }());
    const int32_t tail = rr.n_chunks * C - rr.n_tokens;
    a.sel_len[row] = min(n_sel, cap) * C - (last_in ? tail : 0);
  }
}

// ---- the shortlist's top-k: a cluster of CTAs a row --------------------------------------------
// The best a.shortlist of a row's candidates (page bounds or sketch scores in a.scores) into
// a.list, ascending (all candidates when there are no more; nothing for a row whose candidates
// fit); the same winners as topk_kernel's rule (key > T, and the last `need` of the ties). The
// row's candidates are cut into K contiguous segments, one per CTA of a K-CTA cluster (grid
// rows · K, cluster K along x): each radix pass counts its segment into its own histogram, the
// cluster barrier publishes them, and every CTA sums the K histograms through distributed shared
// memory and picks the same bin; then each CTA's winner counts place its output after the lower
// ranks'. At batch 1 a row's 8K-16K candidates (128K-256K tokens) keep 8 SMs busy, not one:
// session 25's Nsight Compute had the one-CTA pass at 21 µs a layer at 128K. Keys sit in shared
// memory (kShortlistSegKeys a CTA: rows of up to 64K candidates at K = 8); a longer segment
// reads them from L2 (kShared false).
constexpr int kShortlistThreads = 256;
constexpr int kShortlistMaxCluster = 8;    // the portable cluster size
constexpr int kShortlistSegMin = 64;       // candidates a CTA at least (smaller rows, fewer CTAs)
constexpr int kShortlistSegKeys = 8192;    // keys a CTA keeps in shared memory (32 KiB)
template <bool kShared>
__global__ void __launch_bounds__(kShortlistThreads) shortlist_kernel(StepTables t, SelectArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  namespace cg = cooperative_groups;
  using Scan = cub::BlockScan<int, kShortlistThreads>;
  __shared__ uint32_t skeys[kShared ? kShortlistSegKeys : 1];
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[4][256];  // one per radix pass: another CTA may still read the previous one
  __shared__ int merged[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  __shared__ int s_count[2];  // this CTA's winners above T and ties at T
  const cg::cluster_group cluster = cg::this_cluster();
  const int K = static_cast<int>(cluster.num_blocks());
  const int me = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.x / K;
  const int64_t i = row / a.n_kv_heads;
  // Every exit before the first cluster barrier depends on the row alone: the whole cluster leaves.
  if (!a.sparse_tok[i]) return;
  const RowRule rr = row_rule(a.rule, t.positions[i] + 1);
  const int32_t n = rr.last - rr.first;
  int32_t* list = a.list + row * a.shortlist;
  const int32_t seg = (n + K - 1) / K;
  const int32_t c0 = min(n, me * seg), len = min(n, c0 + seg) - c0;  // this CTA's candidates [c0, c0 + len)
  if (rr.all || n <= a.shortlist) {  // nothing to select (fits), or every candidate is listed
    if (!rr.all)
      for (int32_t c = tid; c < len; c += kShortlistThreads) list[c0 + c] = rr.first + c0 + c;
    if (me == 0 && tid == 0) a.n_list[row] = rr.all ? 0 : n;
    return;
  }
  const float* sc = a.scores + row * a.score_stride + c0;
  if constexpr (kShared) {
    for (int32_t c = tid; c < len; c += kShortlistThreads) skeys[c] = order_key(sc[c]);
  }
  auto key_at = [&](int32_t c) { return kShared ? skeys[c] : order_key(sc[c]); };
  for (int b = tid; b < 4 * 256; b += kShortlistThreads) (&hist[0][0])[b] = 0;
  if (tid == 0) {
    s_prefix = 0;
    s_need = a.shortlist;  // < n: something to drop
  }
  __syncthreads();
  uint32_t mask = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    const uint32_t prefix = s_prefix;
    radix_count<kShortlistThreads>(hist[pass], len, key_at, mask, prefix, shift);
    cluster.sync();  // every CTA's histogram of this pass complete (and a block barrier)
    for (int b = tid; b < 256; b += kShortlistThreads) {
      int v = 0;
      for (int r = 0; r < K; ++r) v += cluster.map_shared_rank(hist[pass], r)[b];
      merged[b] = v;
    }
    __syncthreads();
    radix_pick(merged, prefix, shift, &s_prefix, &s_need);
    mask |= 255u << shift;
    __syncthreads();
  }
  const uint32_t T = s_prefix;
  const int need = s_need;
  // Per-thread contiguous runs of the segment, scanned for the output positions.
  const WinnerRun w = winner_run<kShortlistThreads>(len, true, key_at, T, scan_tmp);
  if (tid == kShortlistThreads - 1) {
    s_count[0] = w.gt_before + w.gt;
    s_count[1] = w.eq_before + w.eq;
  }
  cluster.sync();  // every CTA's counts published
  int gt_lower = 0, eq_lower = 0, eq_total = 0;  // the lower ranks' winners and ties; all ties
  for (int r = 0; r < K; ++r) {
    const int* cnt = cluster.map_shared_rank(s_count, r);
    const int g = cnt[0], e = cnt[1];
    if (r < me) {
      gt_lower += g;
      eq_lower += e;
    }
    eq_total += e;
  }
  cluster.sync();  // no CTA leaves while its counts may still be read
  const int ties_before = eq_lower + w.eq_before;  // ties before this thread's run, across the cluster
  emit_winners(w, key_at, T, need, ties_before, eq_total,
               gt_lower + w.gt_before + max(0, ties_before - (eq_total - need)),
               [&](int slot, int32_t c) { list[slot] = rr.first + c0 + c; });
  if (me == 0 && tid == 0) a.n_list[row] = a.shortlist;
}

// CTAs a row of shortlist_kernel for rows of up to max_candidates candidates:
// HS_CUDA_TOPK_CLUSTER caps it (default 8; 1: one CTA of 256 threads a row, this kernel alone,
// not the 1024-thread topk_kernel that took the shortlist before it).
int shortlist_cluster(int32_t max_candidates) {
  static const int cap = [] {
    const char* e = std::getenv("HS_CUDA_TOPK_CLUSTER");
    const int v = e ? std::atoi(e) : kShortlistMaxCluster;
    return std::clamp(v, 1, kShortlistMaxCluster);
  }();
  return std::clamp((max_candidates + kShortlistSegMin - 1) / kShortlistSegMin, 1, cap);
}

// The top-k of mode kMode over n_keys candidates a row (keys in shared memory when they fit).
template <int kMode>
void launch_topk_mode(int64_t rows, int32_t n_keys, cudaStream_t s, const StepTables& t, const SelectArgs& a) {
  const size_t smem = static_cast<size_t>(std::max(0, n_keys)) * sizeof(uint32_t);
  static std::atomic<size_t> smem_set[kSmemLimitDevices];
  if (smem <= kTopkSmemBytes && ensure_smem_limit(topk_kernel<true, kMode>, smem, kTopkSmemBytes, smem_set) == cudaSuccess)
    launch_chain(topk_kernel<true, kMode>, dim3(static_cast<unsigned>(rows)), kTopkThreads, smem, s, t, a);
  else
    launch_chain(topk_kernel<false, kMode>, dim3(static_cast<unsigned>(rows)), kTopkThreads, 0, s, t, a);
}

}  // namespace

void launch_shortlist(int64_t rows, int32_t max_candidates, cudaStream_t s, const StepTables& t, const SelectArgs& a) {
  const int K = shortlist_cluster(max_candidates);
  const dim3 grid(static_cast<unsigned>(rows * K));
  const bool fits = (max_candidates + K - 1) / K <= kShortlistSegKeys;
  (void)launch_ex_cluster(fits ? shortlist_kernel<true> : shortlist_kernel<false>, grid, dim3(kShortlistThreads), 0,
                          K, pdl_chain(), s, t, a);
}

void launch_topk(TopkMode mode, int64_t rows, int32_t n_keys, cudaStream_t s, const StepTables& t,
                 const SelectArgs& a) {
  switch (mode) {
    case kTopkFlat: launch_topk_mode<kTopkFlat>(rows, n_keys, s, t, a); break;
    case kTopkFromList: launch_topk_mode<kTopkFromList>(rows, n_keys, s, t, a); break;
    case kTopkListToList: launch_topk_mode<kTopkListToList>(rows, n_keys, s, t, a); break;
    case kTopkRankFromList: launch_topk_mode<kTopkRankFromList>(rows, n_keys, s, t, a); break;
  }
}

}  // namespace hs::cuda
