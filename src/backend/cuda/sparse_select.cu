// backend/cuda/sparse_select.cu — the GPU sparse path's sketch and selection kernels (see
// sparse_kernels.h for what they compute and docs/gpu-sparse.md for the design).
//
// sketch_encode / sketch_rebuild: one block of 64 threads per (key, kv head); the centred key
// sits in shared memory and thread j accumulates s_j = Σ_d (k_d − μ_d) B[d][j] in d order (the
// CPU SketchStore::write's order), rounded to f16 to nearest even.
// sparse_select: project_kernel writes each row's q̂ [G][rank] and bias [G]; pass 1
// (score_kernel): grid (rows, candidate blocks of kChunksPerCta chunks); each warp scores 8
// tokens per tensor-core mma (q̂ split into f16 high and low parts against the f16 sketches,
// fp32 accumulation) and takes max_g (b_g + q̂_g·s) over a chunk's (one page, C = P) tokens.
// Pass 2 (topk_kernel): one block of 1024 per row finds the k-th best candidate key by a 4-pass
// 8-bit radix select over order-preserving uint32 keys (NaN as −inf), takes every candidate
// above it and the last `need` of the ties (ties prefer the later chunk, as the CPU), and
// writes sinks + winners + window in ascending order with two block scans, with their pages
// and the selected key count.
// With a shortlist: bound_kernel bounds every candidate page from its summary (hierarchical
// scoring) and score_kernel<kList> scores the kept pages; with the exact rerank,
// exact_mass_kernel takes the shortlist's (and the forced pages') keys from the KV pages, a warp
// a page, and rerank_rank_kernel ranks the list by group mass before the final top-k.
// Cost: pass 1 reads each candidate token's sketch once (rank · 2 bytes) and recomputes the
// projection per block (G · rank · head_dim FMAs); pass 2 reads the row's scores 5 times (L2);
// the rerank reads R × budget K rows per row (head_dim elements each) and computes G dots a key.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "backend/cuda/kv_elem.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/sparse_kernels.h"

namespace hs::cuda {
namespace {

constexpr int kEncodeThreads = 256;  // 8 warps, each a slice of head_dim
constexpr int kMaxHeadDim = 256;
constexpr int kScoreThreads = 256;
constexpr int kChunksPerWarp = 16;  // candidate chunks a score warp takes (<= 32)
constexpr int kChunksPerCta = kChunksPerWarp * (256 / 32);
constexpr int kProjThreads = 256;
constexpr int kTopkThreads = 1024;
constexpr size_t kTopkSmemBytes = 160 * 1024;
constexpr int kMaxGroup = 8;

__device__ __forceinline__ uint16_t f16_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }

// x [head_dim] (centred key, shared) -> the sketch of (block, head, tp). kEncodeThreads / 32 warps
// each sum a slice of head_dim for every column (lane j, j + 32), then the slices are added in
// warp order through shared memory: every B load is coalesced and few are outstanding per lane.
__device__ __forceinline__ void encode_sketch(const float* x, const SketchLayerView& sk, const SketchBasisView& b,
                                              int h, int32_t block, int tp) {
  constexpr int kWarpsE = kEncodeThreads / 32;
  __shared__ float part[kWarpsE][kMaxSketchRank];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = b.rank, D = b.head_dim;
  const float* B = b.B + static_cast<int64_t>(h) * D * r;
  const int d0 = warp * D / kWarpsE, d1 = (warp + 1) * D / kWarpsE;
  for (int j = lane; j < r; j += 32) {
    float s = 0.0f;
#pragma unroll 8
    for (int d = d0; d < d1; ++d) s += x[d] * B[static_cast<int64_t>(d) * r + j];
    part[warp][j] = s;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < r; j += blockDim.x) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsE; ++w) s += part[w][j];
    sk.base[((static_cast<int64_t>(block) * sk.n_kv_heads + h) * sk.page_tokens + tp) * r + j] = f16_bits(s);
  }
}

__global__ void __launch_bounds__(kEncodeThreads) sketch_encode_kernel(SketchLayerView sk, SketchBasisView b,
                                                                       StepTables t, CRows k) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float x[kMaxHeadDim];
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y, D = b.head_dim;
  const float* kr = k.p + i * k.stride + static_cast<int64_t>(h) * D;
  const float* mu = b.mu + static_cast<int64_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) x[d] = kr[d] - mu[d];
  __syncthreads();
  const int32_t pos = t.positions[i];
  const int32_t block = t.page_indices[t.page_indptr[t.seq_index[i]] + pos / sk.page_tokens];
  if (sk.residency && pos % sk.page_tokens == 0 && threadIdx.x == 0)
    sk.residency[static_cast<int64_t>(h) * sk.n_blocks + block] = -1;
  encode_sketch(x, sk, b, h, block, pos % sk.page_tokens);
}

// Scaled pages (fp8 / int8 / int4): element d of the K row of token tp of kv head h's block,
// decoded as kv/kv_quant.h's kv_decode_row does.
__device__ __forceinline__ float scaled_k(const KvLayerView& kv, const uint8_t* blk, int tp, int d) {
  const int D = kv.head_dim;
  const int64_t row = kv_elem_row_bytes(kv.elem, D);
  const uint8_t* r = blk + static_cast<int64_t>(tp) * 2 * row;
  const __half* sc = reinterpret_cast<const __half*>(blk + kv.scales_offset + static_cast<int64_t>(tp) * 2 * kv_elem_scale_bytes(kv.elem));
  const float dh = __half2float(sc[0]);
  if (kv.elem == KvElem::kInt4) {
    const int half = D / 2;
    const uint32_t u = d < half ? (r[d] & 0xfu) : (r[d - half] >> 4);
    return fmaf(static_cast<float>(u), dh, __half2float(sc[1]));
  }
  if (kv.elem == KvElem::kInt8) return dh * static_cast<float>(static_cast<int8_t>(r[d]));
  const __half_raw e = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(r[d]), __NV_E4M3);
  return dh * __half2float(__half(e));
}

// Page element loaders of sketch_rebuild: element d of the K row of token tp of kv head h in
// `block`. T = float / __half / __nv_bfloat16 for plain pages; ScaledPages for fp8 / int8 / int4.
struct ScaledPages {};
template <typename T>
__device__ __forceinline__ float page_k(const KvLayerView& kv, int32_t block, int h, int tp, int d) {
  const T* row = static_cast<const T*>(kv.base) + static_cast<int64_t>(block) * kv.page_elems +
                 (static_cast<int64_t>(h) * kv.page_tokens + tp) * 2 * kv.head_dim;  // K half of the row
  return to_f<T>(row[d]);
}
template <>
__device__ __forceinline__ float page_k<ScaledPages>(const KvLayerView& kv, int32_t block, int h, int tp, int d) {
  const uint8_t* blk = static_cast<const uint8_t*>(kv.base) + static_cast<int64_t>(block) * kv.page_elems +
                       static_cast<int64_t>(h) * kv.head_stride;
  return scaled_k(kv, blk, tp, d);
}

// One block per (token of the sequence, kv head): the sketch of the key already in the pages.
template <typename T>
__global__ void __launch_bounds__(kEncodeThreads) sketch_rebuild_kernel(SketchLayerView sk, SketchBasisView b,
                                                                        KvLayerView kv, const int32_t* pages) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float x[kMaxHeadDim];
  const int32_t pos = static_cast<int32_t>(blockIdx.x);
  const int h = blockIdx.y, D = b.head_dim, P = kv.page_tokens;
  const int32_t block = pages[pos / P];
  const float* mu = b.mu + static_cast<int64_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) x[d] = page_k<T>(kv, block, h, pos % P, d) - mu[d];
  if (sk.residency && pos % P == 0 && threadIdx.x == 0) sk.residency[static_cast<int64_t>(h) * sk.n_blocks + block] = -1;
  __syncthreads();
  encode_sketch(x, sk, b, h, block, pos % P);
}

// ---- page summaries (hierarchical scoring) ------------------------------------------------

// Summary of (block, head) over the page's tokens [0, fill): thread j < rank takes dim j's max
// and min of the f16 sketches (exact: f16 in, f16 out).
__device__ __forceinline__ void summarize_page(const SketchLayerView& sk, int h, int32_t block, int fill) {
  const int r = sk.rank, P = sk.page_tokens;
  const uint16_t* sp = sk.base + (static_cast<int64_t>(block) * sk.n_kv_heads + h) * P * r;
  uint16_t* out = sk.summary + (static_cast<int64_t>(block) * sk.n_kv_heads + h) * 2 * r;
  for (int j = threadIdx.x; j < r; j += blockDim.x) {
    float mx = -INFINITY, mn = INFINITY;
    for (int t = 0; t < fill; ++t) {
      const float v = __half2float(__ushort_as_half(sp[t * r + j]));
      mx = fmaxf(mx, v);
      mn = fminf(mn, v);
    }
    out[j] = __half_as_ushort(__float2half_rn(mx));
    out[r + j] = __half_as_ushort(__float2half_rn(mn));
  }
}

// After sketch_encode: grid (n tokens, n_kv), kMaxSketchRank threads. Token i summarizes its page
// when it is the step's last token of that page (the next token is another sequence's or on
// another page: a sequence's tokens of a step are consecutive and ascending), over [0, pos % P].
__global__ void __launch_bounds__(kMaxSketchRank) summary_encode_kernel(SketchLayerView sk, StepTables t,
                                                                        int64_t n_tokens) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y, P = sk.page_tokens;
  const int32_t pos = t.positions[i];
  if (i + 1 < n_tokens && t.seq_index[i + 1] == t.seq_index[i] && t.positions[i + 1] / P == pos / P) return;
  const int32_t block = t.page_indices[t.page_indptr[t.seq_index[i]] + pos / P];
  summarize_page(sk, h, block, pos % P + 1);
}

// After sketch_rebuild: grid (pages of the sequence, n_kv).
__global__ void __launch_bounds__(kMaxSketchRank) summary_rebuild_kernel(SketchLayerView sk, const int32_t* pages,
                                                                         int32_t n_tokens) {
  pdl_launch_dependents();
  pdl_wait();
  const int32_t pg = static_cast<int32_t>(blockIdx.x);
  const int P = sk.page_tokens;
  summarize_page(sk, blockIdx.y, pages[pg], min(P, n_tokens - pg * P));
}

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

// q̂ [G][rank] and bias [G] of every sparse row, to a.scores' projection area: row r's
// (G * rank + G) floats at proj + r * proj_stride. 8 warps each take a slice of head_dim; lane
// j sums column j of A (and column rank = mu, the bias) over its slice for all G heads, every
// load coalesced and all of a slice's loads independent; the slices add through shared memory.
__global__ void __launch_bounds__(kProjThreads) project_kernel(SketchBasisView b, CRows q, SelectArgs a, float* proj,
                                                               int proj_stride) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr int kW = kProjThreads / 32;
  __shared__ float part[kW][kMaxGroup][kMaxSketchRank + 1];
  const int64_t row = blockIdx.x;
  const int64_t i = row / a.n_kv_heads;
  const int h = static_cast<int>(row % a.n_kv_heads);
  if (!a.sparse_tok[i]) return;
  const int G = a.group, D = b.head_dim, r = b.rank;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* qrow = q.p + i * q.stride + static_cast<int64_t>(h) * G * D;
  const float* A = b.A + static_cast<int64_t>(h) * D * r;
  const float* mu = b.mu + static_cast<int64_t>(h) * D;
  const int d0 = warp * D / kW, d1 = (warp + 1) * D / kW;
  for (int col = lane; col <= r; col += 32) {
    float acc[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) acc[g] = 0.0f;
#pragma unroll 8
    for (int d = d0; d < d1; ++d) {
      const float av = col < r ? A[static_cast<int64_t>(d) * r + col] : mu[d];
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < G) acc[g] += qrow[static_cast<int64_t>(g) * D + d] * av;
    }
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g)
      if (g < G) part[warp][g][col] = acc[g];
  }
  __syncthreads();
  float* out = proj + row * proj_stride;
  for (int idx = threadIdx.x; idx < G * (r + 1); idx += blockDim.x) {
    const int g = idx / (r + 1), col = idx % (r + 1);
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kW; ++w) v += part[w][g][col];
    out[col < r ? g * r + col : G * r + g] = v;
  }
}

// Page bounds (hierarchical scoring): grid (rows, candidate blocks of kChunksPerCta chunks), two
// threads a chunk, each half of the dims: max_g (b_g + Σ_j max(q̂_gj mx_j, q̂_gj mn_j)) from the
// page's summary, an upper bound of the max rule's chunk score (up to the f16 rounding of the
// sketches both read), written where score_kernel writes its scores.
template <int R>
__global__ void __launch_bounds__(kScoreThreads) bound_kernel(SketchLayerView sk, StepTables t, SelectArgs a,
                                                              const float* proj, int proj_stride) {
  pdl_launch_dependents();
  pdl_wait();
  static_assert(2 * kChunksPerCta == kScoreThreads, "two threads a chunk");
  constexpr int H = R / 2;  // dims a thread bounds
  __shared__ float qs[kMaxGroup * R + kMaxGroup];
  const int64_t row = blockIdx.x;
  const int64_t i = row / a.n_kv_heads;
  const int h = static_cast<int>(row % a.n_kv_heads);
  if (!a.sparse_tok[i]) return;
  const RowRule rr = row_rule(a.rule, t.positions[i] + 1);
  if (rr.all) return;
  const int G = a.group;
  const int32_t c = rr.first + static_cast<int32_t>(blockIdx.y) * kChunksPerCta + static_cast<int32_t>(threadIdx.x >> 1);
  if (rr.first + static_cast<int32_t>(blockIdx.y) * kChunksPerCta >= rr.last) return;  // CTA-uniform
  const float* pr = proj + row * proj_stride;
  for (int idx = threadIdx.x; idx < G * R + G; idx += blockDim.x) qs[idx] = pr[idx];
  __syncthreads();
  const int half = threadIdx.x & 1;
  float ub[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) ub[g] = 0.0f;
  if (c < rr.last) {
    const int32_t block = t.page_indices[t.page_indptr[t.seq_index[i]] + c];
    const uint16_t* sm = sk.summary + (static_cast<int64_t>(block) * sk.n_kv_heads + h) * 2 * R + half * H;
    uint4 mx4[H / 8], mn4[H / 8];
#pragma unroll
    for (int q = 0; q < H / 8; ++q) {
      mx4[q] = reinterpret_cast<const uint4*>(sm)[q];
      mn4[q] = reinterpret_cast<const uint4*>(sm + R)[q];
    }
    const __half* mx = reinterpret_cast<const __half*>(mx4);
    const __half* mn = reinterpret_cast<const __half*>(mn4);
#pragma unroll
    for (int j = 0; j < H; ++j) {
      const float hi = __half2float(mx[j]), lo = __half2float(mn[j]);
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= G) break;
        const float qv = qs[g * R + half * H + j];
        ub[g] += fmaxf(qv * hi, qv * lo);
      }
    }
  }
  float best = -INFINITY;
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= G) break;
    const float v = ub[g] + __shfl_xor_sync(0xffffffffu, ub[g], 1);
    best = fmaxf(best, qs[G * R + g] + v);
  }
  if (c < rr.last && half == 0) a.scores[row * a.score_stride + (c - rr.first)] = best;
}

// Chunk scores on tensor cores: each warp scores kChunksPerWarp consecutive candidate chunks,
// 8 tokens at a time as mma.sync.m16n8k16 (mma.cuh): A = q̂ of the row's G heads, rows 0..7 its
// f16 high part and rows 8..15 the f16 remainder (q̂ · s − hi, s a power of two putting max|q̂ s|
// in [2^13, 2^14)), so hi + lo carries ~22 bits and the scores match fp32 dots of the f16
// sketches to ~1e-6 relative; B = 8 tokens' sketches, lane (g, t) supplying token g's dims
// [t R/4, (t+1) R/4) (one R/2-byte load: a warp reads 8 whole tokens, 8 R contiguous bytes).
// The k order inside an mma is permuted alike in A and B (k-block b: fragment cols 2t, 2t+1,
// 2t+8, 2t+9 are the lane's dims 4b..4b+3), which a dot product does not see. C row g holds
// head g's hi (c0, c1) and lo (c2, c3) partial scores of tokens 2t, 2t+1; rows g >= G take a
// -inf bias. A chunk's max reduces over its P / 8 token groups, the lane's two tokens and the
// warp's lanes. kUnroll chunks' loads are in flight while the previous are scored; the warp's
// pages are read once (lane k: chunk k) and broadcast by shuffles. Needs P a multiple of 8.
template <int R, int TG, bool kList>
__global__ void __launch_bounds__(kScoreThreads, 3) score_kernel(SketchLayerView sk, StepTables t, SelectArgs a,
                                                                 const float* proj, int proj_stride) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr int KB = R / 16;     // mma k-blocks per token group
  constexpr int DPT = R / 4;     // sketch dims a lane loads per token
  constexpr int WPT = DPT / 2;   // ... as 32-bit words
  constexpr int kUnroll = 4;     // chunks in flight
  constexpr int P = TG * 8;      // tokens per chunk (= page)
  const int G = a.group;
  const int64_t row = blockIdx.x;
  const int64_t i = row / a.n_kv_heads;
  const int h = static_cast<int>(row % a.n_kv_heads);
  if (!a.sparse_tok[i]) return;
  const RowRule rr = row_rule(a.rule, t.positions[i] + 1);
  if (rr.all) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Candidates [lo, hi): chunks first.. (flat) or shortlist entries 0.. (kList: chunk list[c]).
  const int32_t* list = kList ? a.list + row * a.shortlist : nullptr;
  const int32_t lo = kList ? 0 : rr.first, hi = kList ? a.n_list[row] : rr.last;
  const int32_t c0 = lo + (static_cast<int32_t>(blockIdx.y) * (kScoreThreads / 32) + warp) * kChunksPerWarp;
  if (c0 >= hi) return;
  const int32_t nc = min(hi - c0, kChunksPerWarp);
  const int g = lane >> 2, tq = lane & 3;
  const float* pr = proj + row * proj_stride;

  // The row's scale s = 2^(14 - e), max|q̂| < 2^e.
  float amax = 0.0f;
  for (int idx = lane; idx < G * R; idx += 32) amax = fmaxf(amax, fabsf(pr[idx]));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  int e = 0;
  (void)frexpf(amax, &e);
  const float sc = amax > 0.0f && amax < INFINITY ? ldexpf(1.0f, 14 - e) : 1.0f, inv_sc = 1.0f / sc;
  // A fragments: this lane's rows g (hi of head g) and g + 8 (lo of head g); its dims per k-block.
  uint32_t afr[KB][4];
  auto split = [&](int d, float& hi_f, float& lo_f) {
    const float x = g < G ? pr[g * R + d] * sc : 0.0f;
    const __half hi = __float2half_rn(x);
    hi_f = __half2float(hi);
    lo_f = x - hi_f;
  };
  auto pack = [](float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  };
#pragma unroll
  for (int kb = 0; kb < KB; ++kb) {
    const int d0 = tq * DPT + 4 * kb;
    float h0, l0, h1, l1, h2, l2, h3, l3;
    split(d0, h0, l0);
    split(d0 + 1, h1, l1);
    split(d0 + 2, h2, l2);
    split(d0 + 3, h3, l3);
    afr[kb][0] = pack(h0, h1);  // row g, cols 2t, 2t+1: dims d0, d0+1 (hi)
    afr[kb][1] = pack(l0, l1);  // row g+8: the remainders
    afr[kb][2] = pack(h2, h3);  // row g, cols 2t+8, 2t+9: dims d0+2, d0+3
    afr[kb][3] = pack(l2, l3);
  }
  const float bias = g < G ? pr[G * R + g] : -INFINITY;

  const int32_t* pages = t.page_indices + t.page_indptr[t.seq_index[i]];
  const int32_t my_page = lane < nc ? pages[kList ? list[c0 + lane] : c0 + lane] : 0;
  // Lane's words of token (tg * 8 + g) of a page: head_base + page * page_stride + tg * 8 * R.
  const uint16_t* head_base = sk.base + static_cast<int64_t>(h) * P * R + g * R + tq * DPT;
  const int64_t page_stride = static_cast<int64_t>(sk.n_kv_heads) * P * R;
  float* out = kList ? a.list_scores + row * a.shortlist : a.scores + row * a.score_stride - rr.first;
  using Words = uint32_t[TG][WPT];
  auto load = [&](Words& w, int c) {  // chunk c of the warp (c < nc, warp-uniform)
    const int page = __shfl_sync(0xffffffffu, my_page, c);
    const uint16_t* base = head_base + page * page_stride;
#pragma unroll
    for (int tg = 0; tg < TG; ++tg) {
      const uint16_t* src = base + tg * 8 * R;
      if constexpr (WPT == 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(src);
        w[tg][0] = v.x;
        w[tg][1] = v.y;
      } else {
#pragma unroll
        for (int q = 0; q < WPT / 4; ++q) {
          const uint4 v = *reinterpret_cast<const uint4*>(src + 8 * q);
          w[tg][4 * q] = v.x;
          w[tg][4 * q + 1] = v.y;
          w[tg][4 * q + 2] = v.z;
          w[tg][4 * q + 3] = v.w;
        }
      }
    }
  };
  Words buf[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (u < nc) load(buf[u], u);
  for (int c = 0; c < nc; c += kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (c + u >= nc) break;  // warp-uniform
      float run = -INFINITY;
#pragma unroll
      for (int tg = 0; tg < TG; ++tg) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int kb = 0; kb < KB; ++kb)
          mma_16816<false>(acc, afr[kb][0], afr[kb][1], afr[kb][2], afr[kb][3], buf[u][tg][2 * kb],
                           buf[u][tg][2 * kb + 1]);
        run = fmaxf(run, fmaxf(fmaf(acc[0] + acc[2], inv_sc, bias), fmaf(acc[1] + acc[3], inv_sc, bias)));
      }
      if (c + u + kUnroll < nc) load(buf[u], c + u + kUnroll);  // refill the slot just scored
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) run = fmaxf(run, __shfl_xor_sync(0xffffffffu, run, off));
      if (lane == 0) out[c0 + c + u] = run;
    }
  }
}

// ---- the exact rerank (SelectArgs::rerank) ------------------------------------------------

constexpr int kMassWarps = 8;  // entries (chunks) a block of exact_mass_kernel takes at once

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

// Eight K elements [d, d + 8) of token tp of kv head h in `block` (d a multiple of 8): plain
// pages in one (f16 / bf16) or two (f32) 16-byte loads, scaled pages element by element.
template <typename T>
__device__ __forceinline__ void page_k8(const KvLayerView& kv, int32_t block, int h, int tp, int d, float (&k)[8]) {
  const T* row = static_cast<const T*>(kv.base) + static_cast<int64_t>(block) * kv.page_elems +
                 (static_cast<int64_t>(h) * kv.page_tokens + tp) * 2 * kv.head_dim + d;
  if constexpr (std::is_same_v<T, float>) {
    const float4 lo = reinterpret_cast<const float4*>(row)[0], hi = reinterpret_cast<const float4*>(row)[1];
    k[0] = lo.x, k[1] = lo.y, k[2] = lo.z, k[3] = lo.w, k[4] = hi.x, k[5] = hi.y, k[6] = hi.z, k[7] = hi.w;
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(row);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int j = 0; j < 8; ++j) k[j] = to_f<T>(e[j]);
  }
}
template <>
__device__ __forceinline__ void page_k8<ScaledPages>(const KvLayerView& kv, int32_t block, int h, int tp, int d,
                                                     float (&k)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) k[j] = page_k<ScaledPages>(kv, block, h, tp, d + j);
}

// Grid (rows, entries / kMassWarps): warp w of block y takes entry y * kMassWarps + w, one chunk
// (= one page of P tokens), all of its tokens at once: lane l takes token l % P and the l / P-th
// of the 32 / P slices of head_dim (its K elements in 16-byte loads, all in flight together;
// q from shared memory, broadcast to the lanes of a slice), the slices add by shuffles, and per
// head g the P lanes of a slice reduce max and sum of exp(scale q_g . k_t): L_g = max + log(sum).
// Exact widening of the stored keys (page_k8 / page_k); fp32 dots and exp/log (expf / logf, not
// the approximate intrinsics). Cost: one memory round trip a page, not one a token.
template <typename T, int P>
__global__ void __launch_bounds__(kMassWarps * 32) exact_mass_kernel(StepTables t, CRows q, SelectArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr int kSlices = 32 / P;  // lanes a token
  __shared__ __align__(16) float qs[kMaxGroup * kMaxHeadDim];
  const int64_t row = blockIdx.x;
  const int64_t i = row / a.n_kv_heads;
  const int h = static_cast<int>(row % a.n_kv_heads);
  if (!a.sparse_tok[i]) return;
  const RowRule rr = row_rule(a.rule, t.positions[i] + 1);
  if (rr.all) return;
  const int32_t n_list = a.n_list[row];
  const int32_t n_ent = rerank_entries(rr, n_list);
  if (static_cast<int32_t>(blockIdx.y) * kMassWarps >= n_ent) return;  // block-uniform
  const int G = a.group, D = a.kv.head_dim;
  const float* qrow = q.p + i * q.stride + static_cast<int64_t>(h) * G * D;
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) qs[idx] = qrow[idx];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t e = static_cast<int32_t>(blockIdx.y) * kMassWarps + warp;
  if (e >= n_ent) return;
  const int32_t chunk = rerank_chunk(rr, a.list + row * a.shortlist, n_list, e);
  const int32_t block = t.page_indices[t.page_indptr[t.seq_index[i]] + chunk];
  const int n_tok = min(P, rr.n_tokens - chunk * P);  // a chunk is one page (C = P)
  const int tp = lane % P, slice = lane / P;
  const int span = (D + kSlices - 1) / kSlices, d0 = slice * span, d1 = min(D, d0 + span);
  float dot[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) dot[g] = 0.0f;
  if (tp < n_tok) {
    if (D % (8 * kSlices) == 0) {
      for (int d = d0; d < d1; d += 8) {
        float k[8];
        page_k8<T>(a.kv, block, h, tp, d, k);
        // q in two 16-byte shared loads a head (d is a multiple of 8): the kernel was bound by
        // the shared-load queue with one 4-byte load a product (Nsight Compute, session 25).
        // Each head's products still add in the order u = 0..7.
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g >= G) break;
          const float4 qa = *reinterpret_cast<const float4*>(&qs[g * D + d]);
          const float4 qb = *reinterpret_cast<const float4*>(&qs[g * D + d + 4]);
          float acc = dot[g];
          acc = fmaf(qa.x, k[0], acc);
          acc = fmaf(qa.y, k[1], acc);
          acc = fmaf(qa.z, k[2], acc);
          acc = fmaf(qa.w, k[3], acc);
          acc = fmaf(qb.x, k[4], acc);
          acc = fmaf(qb.y, k[5], acc);
          acc = fmaf(qb.z, k[6], acc);
          dot[g] = fmaf(qb.w, k[7], acc);
        }
      }
    } else {
      for (int d = d0; d < d1; ++d) {
        const float k = page_k<T>(a.kv, block, h, tp, d);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g)
          if (g < G) dot[g] = fmaf(qs[g * D + d], k, dot[g]);
      }
    }
  }
  float* out = a.mass + (row * (a.shortlist + a.rule.max_selected) + e) * G;
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= G) break;
    float v = dot[g];
#pragma unroll
    for (int off = P; off < 32; off <<= 1) v += __shfl_xor_sync(0xffffffffu, v, off);  // the token's slices
    const float x = tp < n_tok ? a.scale * v : -INFINITY;
    float mx = x;
#pragma unroll
    for (int off = 1; off < P; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    float sum = x > -INFINITY ? expf(x - mx) : 0.0f;
#pragma unroll
    for (int off = 1; off < P; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == g) out[g] = mx > -INFINITY ? mx + logf(sum) : -INFINITY;
  }
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

// One block per row: rank_list (the top-k's kTopkRankFromList runs the same in its own block).
__global__ void __launch_bounds__(kRankThreads) rerank_rank_kernel(StepTables t, SelectArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t row = blockIdx.x;
  const int64_t i = row / a.n_kv_heads;
  if (!a.sparse_tok[i]) return;
  const RowRule rr = row_rule(a.rule, t.positions[i] + 1);
  if (rr.all) return;
  rank_list(a, row, rr, a.n_list[row]);
}

template <typename T>
void launch_mass(dim3 grid, cudaStream_t s, const StepTables& t, const CRows& q, const SelectArgs& a) {
  switch (a.kv.page_tokens) {  // 8, 16 or 32 (launch_sparse_select checks)
    case 8: launch_chain(exact_mass_kernel<T, 8>, grid, kMassWarps * 32, 0, s, t, q, a); break;
    case 16: launch_chain(exact_mass_kernel<T, 16>, grid, kMassWarps * 32, 0, s, t, q, a); break;
    default: launch_chain(exact_mass_kernel<T, 32>, grid, kMassWarps * 32, 0, s, t, q, a); break;
  }
}

// The exact log masses (stages & kSelectRerank), then the group-mass ranking (kSelectRank).
void launch_rerank(int64_t rows, cudaStream_t s, const StepTables& t, const CRows& q, const SelectArgs& a,
                   int stages) {
  const unsigned blocks =
      static_cast<unsigned>((a.shortlist + a.rule.max_selected + kMassWarps - 1) / kMassWarps);
  const dim3 grid(static_cast<unsigned>(rows), blocks);
  if (stages & kSelectRerank) {
    switch (a.kv.elem) {
      case KvElem::kF32: launch_mass<float>(grid, s, t, q, a); break;
      case KvElem::kF16: launch_mass<__half>(grid, s, t, q, a); break;
      case KvElem::kBF16: launch_mass<__nv_bfloat16>(grid, s, t, q, a); break;
      default: launch_mass<ScaledPages>(grid, s, t, q, a); break;
    }
  }
  if (stages & kSelectRank) launch_chain(rerank_rank_kernel, dim3(static_cast<unsigned>(rows)), kRankThreads, 0, s, t, a);
}

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
constexpr int kTopkFlat = 0, kTopkFromList = 2, kTopkListToList = 3, kTopkRankFromList = 4;
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

void launch_shortlist(int64_t rows, int32_t max_candidates, cudaStream_t s, const StepTables& t, const SelectArgs& a) {
  const int K = shortlist_cluster(max_candidates);
  const dim3 grid(static_cast<unsigned>(rows * K));
  const bool fits = (max_candidates + K - 1) / K <= kShortlistSegKeys;
  (void)launch_ex_cluster(fits ? shortlist_kernel<true> : shortlist_kernel<false>, grid, dim3(kShortlistThreads), 0,
                          K, pdl_chain(), s, t, a);
}

template <int R, bool kList>
void launch_score_p(int page_tokens, dim3 grid, cudaStream_t s, const SketchLayerView& sk, const StepTables& t,
                    const SelectArgs& a, const float* proj, int proj_stride) {
  switch (page_tokens) {  // 8, 16 or 32 (launch_sparse_select checks)
    case 8: launch_chain(score_kernel<R, 1, kList>, grid, kScoreThreads, 0, s, sk, t, a, proj, proj_stride); break;
    case 16: launch_chain(score_kernel<R, 2, kList>, grid, kScoreThreads, 0, s, sk, t, a, proj, proj_stride); break;
    default: launch_chain(score_kernel<R, 4, kList>, grid, kScoreThreads, 0, s, sk, t, a, proj, proj_stride); break;
  }
}
template <bool kList>
void launch_score(int rank, dim3 grid, cudaStream_t s, const SketchLayerView& sk, const StepTables& t,
                  const SelectArgs& a, const float* proj, int proj_stride) {
  switch (rank) {
    case 16: launch_score_p<16, kList>(sk.page_tokens, grid, s, sk, t, a, proj, proj_stride); break;
    case 32: launch_score_p<32, kList>(sk.page_tokens, grid, s, sk, t, a, proj, proj_stride); break;
    default: launch_score_p<64, kList>(sk.page_tokens, grid, s, sk, t, a, proj, proj_stride); break;
  }
}
void launch_bound(int rank, dim3 grid, cudaStream_t s, const SketchLayerView& sk, const StepTables& t,
                  const SelectArgs& a, const float* proj, int proj_stride) {
  switch (rank) {
    case 16: launch_chain(bound_kernel<16>, grid, kScoreThreads, 0, s, sk, t, a, proj, proj_stride); break;
    case 32: launch_chain(bound_kernel<32>, grid, kScoreThreads, 0, s, sk, t, a, proj, proj_stride); break;
    default: launch_chain(bound_kernel<64>, grid, kScoreThreads, 0, s, sk, t, a, proj, proj_stride); break;
  }
}
// The top-k of mode kMode over n_keys candidates a row (keys in shared memory when they fit).
template <int kMode>
void launch_topk(int64_t rows, int32_t n_keys, cudaStream_t s, const StepTables& t, const SelectArgs& a) {
  const size_t smem = static_cast<size_t>(std::max(0, n_keys)) * sizeof(uint32_t);
  static const bool smem_ok = cudaFuncSetAttribute(topk_kernel<true, kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   kTopkSmemBytes) == cudaSuccess;
  if (smem_ok && smem <= kTopkSmemBytes)
    launch_chain(topk_kernel<true, kMode>, dim3(static_cast<unsigned>(rows)), kTopkThreads, smem, s, t, a);
  else
    launch_chain(topk_kernel<false, kMode>, dim3(static_cast<unsigned>(rows)), kTopkThreads, 0, s, t, a);
}

bool rank_ok(int rank) { return rank == 16 || rank == 32 || rank == 64; }

}  // namespace

size_t sparse_select_scratch_floats(int64_t rows, int32_t score_stride, int group, int rank) {
  return static_cast<size_t>(rows) * (static_cast<size_t>(score_stride) + static_cast<size_t>(group) * rank + group);
}

cudaError_t launch_sketch_encode(SketchLayerView sk, SketchBasisView b, StepTables t, CRows k, cudaStream_t s) {
  if (k.rows <= 0) return cudaSuccess;
  if (!rank_ok(b.rank) || b.rank != sk.rank || b.head_dim > kMaxHeadDim || k.cols != int64_t{sk.n_kv_heads} * b.head_dim ||
      k.rows > 0x7fffffff || sk.n_kv_heads > 65535)
    return cudaErrorInvalidValue;
  launch_chain(sketch_encode_kernel, dim3(static_cast<unsigned>(k.rows), static_cast<unsigned>(sk.n_kv_heads)),
               kEncodeThreads, 0, s, sk, b, t, k);
  if (sk.summary)
    launch_chain(summary_encode_kernel, dim3(static_cast<unsigned>(k.rows), static_cast<unsigned>(sk.n_kv_heads)),
                 kMaxSketchRank, 0, s, sk, t, k.rows);
  return cudaGetLastError();
}

cudaError_t launch_sketch_rebuild(SketchLayerView sk, SketchBasisView b, KvLayerView kv, const int32_t* pages,
                                  int32_t n_tokens, cudaStream_t s) {
  if (n_tokens <= 0) return cudaSuccess;
  if (!rank_ok(b.rank) || b.rank != sk.rank || b.head_dim > kMaxHeadDim || kv.head_dim != b.head_dim ||
      kv.n_kv_heads != sk.n_kv_heads || kv.page_tokens != sk.page_tokens || sk.n_kv_heads > 65535)
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(sk.n_kv_heads));
  switch (kv.elem) {
    case KvElem::kF32: launch_chain(sketch_rebuild_kernel<float>, grid, kEncodeThreads, 0, s, sk, b, kv, pages); break;
    case KvElem::kF16: launch_chain(sketch_rebuild_kernel<__half>, grid, kEncodeThreads, 0, s, sk, b, kv, pages); break;
    case KvElem::kBF16:
      launch_chain(sketch_rebuild_kernel<__nv_bfloat16>, grid, kEncodeThreads, 0, s, sk, b, kv, pages);
      break;
    case KvElem::kFp8:
    case KvElem::kInt8:
    case KvElem::kInt4:
      launch_chain(sketch_rebuild_kernel<ScaledPages>, grid, kEncodeThreads, 0, s, sk, b, kv, pages);
      break;
    default: return cudaErrorInvalidValue;
  }
  if (sk.summary) {
    const unsigned n_pages = static_cast<unsigned>((n_tokens + sk.page_tokens - 1) / sk.page_tokens);
    launch_chain(summary_rebuild_kernel, dim3(n_pages, static_cast<unsigned>(sk.n_kv_heads)), kMaxSketchRank, 0, s, sk,
                 pages, n_tokens);
  }
  return cudaGetLastError();
}

cudaError_t launch_sparse_select(SketchLayerView sk, SketchBasisView b, StepTables t, CRows q, const SelectArgs& a,
                                 int32_t max_candidates, cudaStream_t s, int stages) {
  if (q.rows <= 0) return cudaSuccess;
  const int P = sk.page_tokens;
  if (!rank_ok(b.rank) || b.rank != sk.rank || a.group < 1 || a.group > kMaxGroup || a.n_kv_heads != sk.n_kv_heads ||
      a.rule.chunk_tokens != P || P < 8 || P > 32 || (P & (P - 1)) != 0 ||
      a.rule.max_selected < 1 ||
      q.cols != int64_t{a.n_kv_heads} * a.group * b.head_dim || max_candidates > a.score_stride)
    return cudaErrorInvalidValue;
  const int64_t rows = q.rows * a.n_kv_heads;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  const unsigned cand_blocks = static_cast<unsigned>(std::max(1, (max_candidates + kChunksPerCta - 1) / kChunksPerCta));
  // The projections sit past the rows' scores (sparse_select_scratch_floats).
  const int proj_stride = a.group * b.rank + a.group;
  float* proj = a.scores + rows * a.score_stride;
  if ((stages & kSelectProject) && max_candidates > 0)
    launch_chain(project_kernel, dim3(static_cast<unsigned>(rows)), kProjThreads, 0, s, b, q, a, proj, proj_stride);
  const float* cp = proj;
  // Hierarchical: page bounds over every candidate, their best a.shortlist, token scores of those.
  const bool lists = a.shortlist > 0 && a.list && a.n_list && a.list_scores;
  const bool rerank = a.rerank && lists && a.mass;
  const bool bounds_rerank = rerank && a.bounds_first && sk.summary;  // the bounds' list is the rerank's
  const bool hier = !bounds_rerank && sk.summary && lists &&
                    (!a.rerank || (a.shortlist2 > 0 && a.list2 && a.n_list2 && a.list2_scores));
  if (a.rerank && (!rerank || a.kv.head_dim != b.head_dim || a.kv.n_kv_heads != a.n_kv_heads ||
                   a.kv.page_tokens != P || b.head_dim > kMaxHeadDim))
    return cudaErrorInvalidValue;
  const bool fuse_rank = (stages & kSelectRank) && (stages & kSelectTopk);
  // With both, the rerank works on list2 (the sketch scores' best of the bounds' shortlist).
  SelectArgs a2 = a;
  if (rerank && hier) {
    a2.shortlist = a.shortlist2;
    a2.list = a.list2;
    a2.n_list = a.n_list2;
    a2.list_scores = a.list2_scores;
  }
  if (max_candidates > 0) {
    const dim3 grid(static_cast<unsigned>(rows), cand_blocks);
    const bool score = stages & kSelectScore, shortlist = stages & kSelectShortlist;
    const unsigned list_blocks = static_cast<unsigned>((a.shortlist + kChunksPerCta - 1) / kChunksPerCta);
    // First stage: every candidate's page bound (then sketch scores of the bounds' list, unless
    // the rerank takes that list as it is) or every candidate's sketch score.
    const bool bounds = bounds_rerank || hier;
    if (score) {
      if (bounds)
        launch_bound(b.rank, grid, s, sk, t, a, cp, proj_stride);
      else
        launch_score<false>(b.rank, grid, s, sk, t, a, cp, proj_stride);
    }
    if (shortlist && (rerank || hier)) {  // the best a.shortlist into list
      launch_shortlist(rows, max_candidates, s, t, a);
      if (hier) launch_score<true>(b.rank, dim3(static_cast<unsigned>(rows), list_blocks), s, sk, t, a, cp, proj_stride);
      if (hier && rerank) launch_topk<kTopkListToList>(rows, std::min(max_candidates, a.shortlist), s, t, a);
    }
    // The ranking runs inside the top-k's launch when both are asked for (not when the profiler
    // times the stages apart).
    if (rerank) launch_rerank(rows, s, t, q, a2, fuse_rank ? stages & ~kSelectRank : stages);  // a2: list2 after the chain, else list
  }
  // Keys in shared memory up to kTopkSmemBytes (40K candidates: 640K tokens of 16), else from L2.
  if (stages & kSelectTopk) {
    if (rerank && fuse_rank && max_candidates > 0)
      launch_topk<kTopkRankFromList>(rows, std::min(max_candidates, a2.shortlist), s, t, a2);
    else if (hier || rerank)
      launch_topk<kTopkFromList>(rows, std::min(max_candidates, a2.shortlist), s, t, a2);
    else
      launch_topk<kTopkFlat>(rows, max_candidates, s, t, a);
  }
  return cudaGetLastError();
}

}  // namespace hs::cuda
