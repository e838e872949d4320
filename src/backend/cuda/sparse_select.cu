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
// Pass 2: the top-k kernels (sparse_topk.cu) pick the winners and write sinks + winners + window
// in ascending order, with their pages and the selected key count.
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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/kv_elem.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/sparse_kernels.h"
#include "backend/cuda/sparse_rows.cuh"
#include "backend/cuda/sparse_topk.h"

namespace hs::cuda {
namespace {

constexpr int kEncodeThreads = 256;  // 8 warps, each a slice of head_dim
constexpr int kMaxHeadDim = 256;
constexpr int kScoreThreads = 256;
constexpr int kChunksPerWarp = 16;  // candidate chunks a score warp takes (<= 32)
constexpr int kChunksPerCta = kChunksPerWarp * (256 / 32);
constexpr int kProjThreads = 256;

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
      if (hier && rerank) launch_topk(kTopkListToList, rows, std::min(max_candidates, a.shortlist), s, t, a);
    }
    // The ranking runs inside the top-k's launch when both are asked for (not when the profiler
    // times the stages apart).
    if (rerank) launch_rerank(rows, s, t, q, a2, fuse_rank ? stages & ~kSelectRank : stages);  // a2: list2 after the chain, else list
  }
  // Keys in shared memory up to kTopkSmemBytes (40K candidates: 640K tokens of 16), else from L2.
  if (stages & kSelectTopk) {
    if (rerank && fuse_rank && max_candidates > 0)
      launch_topk(kTopkRankFromList, rows, std::min(max_candidates, a2.shortlist), s, t, a2);
    else if (hier || rerank)
      launch_topk(kTopkFromList, rows, std::min(max_candidates, a2.shortlist), s, t, a2);
    else
      launch_topk(kTopkFlat, rows, max_candidates, s, t, a);
  }
  return cudaGetLastError();
}

}  // namespace hs::cuda
