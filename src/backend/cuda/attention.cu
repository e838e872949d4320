// backend/cuda/attention.cu — KV writes into the device page copy and exact paged attention.
//
// kv_write: one block per (token, kv head) converts that token's K and V rows to the cache
// dtype (f16 / bf16 round to nearest even, as kv/kv_quant.h does on the host) and stores
// them in its page slot, found through the step's CSR page table. Scaled dtypes (kv/kv_quant.h's
// layout: fp8 e4m3 and int8 with an f16 scale a row, int4 with f16 (d, m) a row): one warp per
// row (K, V) reduces max|x| (int4: min and max) with shuffles and encodes as the host does,
// e.g. fp8: d = f16(min(max|x| / 448, 65504)), bytes e4m3(x · (1 / float(d))) with
// __NV_SATFINITE, zeros when d == 0 — the host encoder's arithmetic step for step (IEEE
// division, no FMA to contract), so the pages match it byte for byte (tests/ops:
// ScaledKvWriteMatchesHostBytes).
//
// attention (flash-decoding, the decode / short-prompt path): the keys [first, pos] of a token
// are cut into n_splits runs of split_len keys. A block of kWarps warps handles one (token,
// kv head, run) for all G query heads of that kv head, so each K / V row is read once per GQA
// group. A row is split over a sub-group of L = head_dim / 8 lanes, 8 consecutive elements
// each: a warp holds 32 / L sub-groups that score their own keys (for llama-8B's head_dim 128,
// G 4: 2 sub-groups of 16 lanes, 16-byte rows per lane, 4 keys each per tile, 8 keys per warp
// tile; for G 5..8 the two sub-groups take the same keys, 4 heads each). A sub-group's tile
// of U keys x G heads partial dots is reduced by a transposing butterfly — each level halves
// the values a lane keeps and sends the other half, so U * G scores take U * G - 1 shuffles
// (plus log2 of the leftover lanes) instead of U * G * log2(L) — and the probabilities go back
// to every lane by U * G indexed shuffles. The online softmax keeps a lagging reference max per head (the
// accumulators are rescaled only when a score exceeds it by 2^8: warp-uniform, rare after the
// first tile), in log2 units (q prescaled by scale * log2(e), ex2.approx). Rows come
// global -> shared by cp.async (zero-fill for keys outside the run: no NaN of unowned slots
// reaches the math) through a ring of S tiles per lane, S - 1 tiles in flight while one is
// computed; each lane reads back only bytes it copied itself, so the ring needs no barrier.
// Warp tiles are aligned to their size, so with pages of >= W tokens a tile is one page: one
// page-index load per tile, prefetched one tile ahead, and the rows at immediate offsets. The
// sub-groups merge through shared memory. With one run the block writes the normalised
// output; with more it writes a partial (max[G] in log2 units, sum[G], acc[G][head_dim]) and
// merge_kernel combines the runs of each (token, query head) like backend/cpu's
// attention_merge. Math is fp32 (ex2.approx.ftz for the softmax: ~2 ulp), K / V widened
// exactly from their storage type; fp8 rows widen byte pairs with cvt.rn.f16x2.e4m3x2 (int8 and
// int4 by a byte permute into the float 2^23 + byte, then one exact subtraction) and the rows'
// f16 scales multiply the score (K) and the probability
// (V); int4 rows (lane li holds bytes [4 li, 4 li + 4): elements 4 li.. in the low nibbles,
// D/2 + 4 li.. in the high ones) are dequantized m + d u in registers before the dots — the
// host's decoded floats up to rounding order.
// Cost: reads (keys * 2 * head_dim) stored elements per (token, kv head) once. The key loop
// of f16 / bf16 head_dim 128 G 4 issues 64 SASS instructions per key and kv head (512 per
// 8-key warp tile; 32 of them the FFMAs of q.k and p.v, 8 the widening): ~8 bytes per
// instruction, so an H200 (4 schedulers per SM) is memory-bound with ~half its issue slots
// free; ~128 KB per SM in flight (2 of a warp's 3 ring tiles). fp8 (75 per key for 260 bytes),
// G 8 (126 per key) and head_dim 256 G 8 (224) are issue-bound below the HBM rate. Prefill
// re-reads the prompt's K / V once per query token: long prompts take flash_prefill.h instead.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_elem.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope.cuh"

namespace hs::cuda {
namespace {

using attn::cp_async;
using attn::cp_async_commit;
using attn::cp_async_wait;
using attn::fast_exp2;
using attn::KernelArgs;
using attn::kLog2e;
using attn::kSlack;
using attn::row_keys;
using attn::RowKeys;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMinSplit = 64;    // keys: no run shorter than this (unless the range is)
constexpr int kMinSplitMany = 256;  // ... nor than this with kManyRows (token, kv head) rows, or for ranges this short
constexpr int64_t kManyRows = 64;
constexpr int kBlocksPerSm = 4;  // what the split aims at

// The attention kernel's element types for scaled KV (bytes of kv/kv_quant.h's scaled layout):
// fp8 and int8 (one byte an element, an f16 scale a row, applied to the score / probability) and
// int4 (two elements a byte, f16 (d, m) a row, dequantized in registers).
struct Fp8 {};
struct Int8 {};
struct Int4 {};

// The float 2^23 + byte b of u (0..255 in the mantissa's low byte): one PRMT.
__device__ __forceinline__ float magic_byte_float(uint32_t u, int b) {
  return __uint_as_float(__byte_perm(u, 0x4b000000u, 0x7650u + static_cast<unsigned>(b)));
}

// Raw 32-bit words of E consecutive stored elements (little-endian: the lower address in the
// low bits) -> floats, exactly: f16 / e4m3 widen through cvt, bf16 by a shift, f32 as is.
// fp8 comes out unscaled (the kernel applies the row scale to the score / probability).
template <typename T, int E>
__device__ __forceinline__ void widen(const uint32_t* w, float (&f)[E]) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int e = 0; e < E; ++e) f[e] = __uint_as_float(w[e]);
  } else if constexpr (std::is_same_v<T, __half>) {
#pragma unroll
    for (int e = 0; e < E / 2; ++e) {
      const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w[e]));
      f[2 * e] = v.x;
      f[2 * e + 1] = v.y;
    }
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int e = 0; e < E / 2; ++e) {
      f[2 * e] = __uint_as_float(w[e] << 16);
      f[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
    }
  } else if constexpr (std::is_same_v<T, Int8>) {
    // q + 128 as the low byte of the float 2^23 + (q + 128) (one byte permute), minus
    // 2^23 + 128: exact, and full-rate ALU work instead of a quarter-rate int-to-float convert.
#pragma unroll
    for (int e = 0; e < E / 4; ++e) {
      const uint32_t u = w[e] ^ 0x80808080u;
#pragma unroll
      for (int b = 0; b < 4; ++b) f[4 * e + b] = magic_byte_float(u, b) - 8388736.0f;
    }
  } else if constexpr (std::is_same_v<T, Int4>) {
    // One word: bytes j..j+3 of the row; low nibbles -> f[0..3], high nibbles -> f[4..7] (the
    // lane's elements j..j+3 and j+D/2..j+D/2+3, kv_quant.h's int4 packing), unscaled 0..15;
    // each as the low byte of the float 2^23 + u, minus 2^23 (exact, as Int8).
    const uint32_t lo = w[0] & 0x0f0f0f0fu, hi = (w[0] >> 4) & 0x0f0f0f0fu;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      f[b] = magic_byte_float(lo, b) - 8388608.0f;
      f[4 + b] = magic_byte_float(hi, b) - 8388608.0f;
    }
  } else {
#pragma unroll
    for (int e = 0; e < E / 4; ++e) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __half2 two(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[e] >> (16 * h)), __NV_E4M3));
        const float2 v = __half22float2(two);
        f[4 * e + 2 * h] = v.x;
        f[4 * e + 2 * h + 1] = v.y;
      }
    }
  }
}

// int4 values u (0..15) -> m + d u, with (d, m) the row's f16 pair (d in the low half).
template <int E>
__device__ __forceinline__ void dequant4(float (&f)[E], uint32_t dm) {
  const float d = attn::f16_lo(dm);
  const float m = attn::f16_hi(dm);
#pragma unroll
  for (int e = 0; e < E; ++e) f[e] = fmaf(f[e], d, m);
}

// ---- kv_write ------------------------------------------------------------------------------

template <typename T>
__global__ void kv_write_kernel(KvLayerView kv, StepTables t, CRows k, CRows v) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int hd = kv.head_dim, P = kv.page_tokens;
  const int32_t pos = t.positions[i];
  const int32_t page = t.page_indices[t.page_indptr[t.seq_index[i]] + pos / P];
  T* dst = static_cast<T*>(kv.base) + static_cast<int64_t>(page) * kv.page_elems +
           (static_cast<int64_t>(h) * P + pos % P) * 2 * hd;
  const float* kr = k.p + i * k.stride + static_cast<int64_t>(h) * hd;
  const float* vr = v.p + i * v.stride + static_cast<int64_t>(h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    dst[d] = from_f<T>(kr[d]);
    dst[hd + d] = from_f<T>(vr[d]);
  }
}

// Token i's K row of kv head 0 in its page (plain pages); head h's at + h * P * 2 * head_dim, its
// V row head_dim further.
template <typename T>
__device__ __forceinline__ T* token_k_slot(const KvLayerView& kv, const StepTables& t, int64_t i, int32_t pos,
                                           int head_dim) {
  const int P = kv.page_tokens;
  const int32_t page = t.page_indices[t.page_indptr[t.seq_index[i]] + pos / P];
  return static_cast<T*>(kv.base) + static_cast<int64_t>(page) * kv.page_elems +
         static_cast<int64_t>(pos % P) * 2 * head_dim;
}

// Token i's V row (every kv head) into the page slot token_k_slot gave, converted; the block's
// threads share it.
template <typename T>
__device__ __forceinline__ void copy_v_row(T* slot, const CRows& v, int64_t i, int head_dim, int P) {
  const float* vr = v.p + i * v.stride;
  for (int64_t e = threadIdx.x; e < v.cols; e += blockDim.x) {
    const int64_t h = e / head_dim, d = e % head_dim;
    slot[h * P * 2 * head_dim + head_dim + d] = from_f<T>(vr[e]);
  }
}

// One K or V row x [hd] f32 into a kv head's block `blk` of scaled pages, as the (token, K|V) row
// `slot` = (pos % P) * 2 + (0: K, 1: V): a warp's work (lane l reads elements l, l + 32, ...; int4
// also l + hd / 2), as kv/kv_quant.cpp's kv_encode_row does: IEEE-rounded intrinsics whatever the
// -prec-div / -fmad flags, so the bytes are the host's.
//   fp8:  d = f16(min(max|x| / 448, 65504)); e4m3(x · (1 / d)) saturating; zeros when d == 0.
//   int8: d = f16(max|x| / 127); q = clamp(rint(x · inv), ±127), inv = d > 0 ? 1 / d : 0.
//   int4: d = f16((max − min) / 15), m = f16(min); u = clamp(rint((x − m) · inv), 0, 15);
//         byte j = u[j] | u[j + hd/2] << 4; scales (d, m).
template <KvElem kElem>
__device__ __forceinline__ void encode_scaled_row(const float* x, uint8_t* blk, int slot, int hd,
                                                  int64_t scales_offset, int lane) {
  constexpr unsigned kAll = 0xffffffffu;
  if constexpr (kElem == KvElem::kInt4) {
    float mn = INFINITY, mx = -INFINITY;
    for (int d = lane; d < hd; d += 32) {
      mn = fminf(mn, x[d]);
      mx = fmaxf(mx, x[d]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      mn = fminf(mn, __shfl_xor_sync(kAll, mn, off));
      mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, off));
    }
    const __half dh = __float2half_rn(__fdiv_rn(__fsub_rn(mx, mn), 15.0f)), mh = __float2half_rn(mn);
    const float df = __half2float(dh), mf = __half2float(mh);
    const float inv = df > 0.0f ? __fdiv_rn(1.0f, df) : 0.0f;
    auto q4 = [&](float val) {
      const float r = rintf(__fmul_rn(__fsub_rn(val, mf), inv));
      return static_cast<uint32_t>(r > 15.0f ? 15.0f : r < 0.0f ? 0.0f : r);
    };
    const int half = hd / 2;
    uint8_t* row = blk + static_cast<int64_t>(slot) * half;
    for (int j = lane; j < half; j += 32) row[j] = static_cast<uint8_t>(q4(x[j]) | (q4(x[j + half]) << 4));
    if (lane == 0) {
      __half* sc = reinterpret_cast<__half*>(blk + scales_offset + 4 * slot);
      sc[0] = dh;
      sc[1] = mh;
    }
  } else {
    float amax = 0.0f;
    for (int d = lane; d < hd; d += 32) amax = fmaxf(amax, fabsf(x[d]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kAll, amax, off));
    uint8_t* row = blk + static_cast<int64_t>(slot) * hd;
    __half dh;
    if constexpr (kElem == KvElem::kInt8) {
      dh = __float2half_rn(__fdiv_rn(amax, 127.0f));
      const float df = __half2float(dh);
      const float inv = df > 0.0f ? __fdiv_rn(1.0f, df) : 0.0f;
      for (int d = lane; d < hd; d += 32) {
        const float r = rintf(__fmul_rn(x[d], inv));
        row[d] = static_cast<uint8_t>(static_cast<int8_t>(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r));
      }
    } else {
      dh = __float2half_rn(fminf(__fdiv_rn(amax, 448.0f), 65504.0f));
      const float df = __half2float(dh);
      if (df > 0.0f) {
        const float inv = __fdiv_rn(1.0f, df);
        for (int d = lane; d < hd; d += 32)
          row[d] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(x[d], inv), __NV_SATFINITE, __NV_E4M3));
      } else {
        for (int d = lane; d < hd; d += 32) row[d] = 0;
      }
    }
    if (lane == 0) *reinterpret_cast<__half*>(blk + scales_offset + 2 * slot) = dh;
  }
}

// Token i's page block of kv head 0 in scaled pages (head h's at + h * head_stride).
__device__ __forceinline__ uint8_t* token_scaled_block(const KvLayerView& kv, const StepTables& t, int64_t i,
                                                       int32_t pos) {
  const int32_t page = t.page_indices[t.page_indptr[t.seq_index[i]] + pos / kv.page_tokens];
  return static_cast<uint8_t*>(kv.base) + static_cast<int64_t>(page) * kv.page_elems;
}

// grid (n tokens, n_kv heads), 64 threads: warp 0 encodes the K row, warp 1 the V row
// (encode_scaled_row).
template <KvElem kElem>
__global__ void __launch_bounds__(64) kv_write_scaled_kernel(KvLayerView kv, StepTables t, CRows k, CRows v) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int kvi = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hd = kv.head_dim;
  const int32_t pos = t.positions[i];
  uint8_t* blk = token_scaled_block(kv, t, i, pos) + static_cast<int64_t>(h) * kv.head_stride;
  const float* x = (kvi == 0 ? k.p + i * k.stride : v.p + i * v.stride) + static_cast<int64_t>(h) * hd;
  encode_scaled_row<kElem>(x, blk, (pos % kv.page_tokens) * 2 + kvi, hd, kv.scales_offset, lane);
}

// RoPE of q and k fused with the K / V write (plain f32 / f16 / bf16 pages: T; scaled fp8 / int8
// / int4 pages: kElem, T unused). grid (n tokens, 2), block (i, 0) rotates token i's q heads in
// place, block (i, 1) its k heads (stored back to k and, converted, into the page slot), then
// copies its V row (scaled pages: after a block barrier, a warp a kv head encodes the rotated K
// row and the V row, encode_scaled_row). The cos / sin of the token's
// head_dim / 2 pairs are computed once per block into shared memory (one double pow + sincos a
// pair, not a pair per head group), then every thread rotates (head, pair)s. Every value is the
// one rope_kernel then kv_write_kernel would produce (rope.cuh's arithmetic).
constexpr int kMaxRopeKvHalf = 512;  // head_dim <= 1024
// Threads a block: up to 1024 on plain pages, 256 on scaled ones (the encoder's registers fit
// 255 a thread without spilling; the (head, pair) loop strides).
constexpr int rope_kv_max_threads(KvElem e) { return kv_elem_scaled(e) ? 256 : 1024; }
template <typename T, KvElem kElem = KvElem::kF32>
__global__ void __launch_bounds__(rope_kv_max_threads(kElem))
    rope_kv_write_kernel(Rows q, Rows k, CRows v, int head_dim, float theta, bool neox, KvLayerView kv, StepTables t) {
  pdl_launch_dependents();  // the next kernel may be scheduled now
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  __shared__ RopeCs cs[kMaxRopeKvHalf];
  const int64_t i = blockIdx.x;
  const bool is_k = blockIdx.y == 1;
  const Rows x = is_k ? k : q;
  const int half = head_dim / 2;
  const int64_t n_heads = x.cols / head_dim;
  const int32_t pos = t.positions[i];
  for (int ii = threadIdx.x; ii < half; ii += blockDim.x) cs[ii] = rope_cs(pos, ii, head_dim, theta);
  constexpr bool kScaled = kv_elem_scaled(kElem);
  T* slot = is_k && !kScaled ? token_k_slot<T>(kv, t, i, pos, head_dim) : nullptr;
  const int P = kv.page_tokens;
  __syncthreads();
  float* row = x.p + i * x.stride;
  for (int64_t e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
    const int64_t h = e / half;
    const int ii = static_cast<int>(e % half);
    const int oa = rope_off_a(ii, half, neox), ob = rope_off_b(ii, half, neox);
    float* hr = row + h * head_dim;
    const float va = hr[oa], vb = hr[ob];
    const float ra = rope_a(va, vb, cs[ii]), rb = rope_b(va, vb, cs[ii]);
    hr[oa] = ra;
    hr[ob] = rb;
    if constexpr (!kScaled) {
      if (is_k) {
        T* d = slot + h * P * 2 * head_dim;
        d[oa] = from_f<T>(ra);
        d[ob] = from_f<T>(rb);
      }
    }
  }
  if (!is_k) return;
  if constexpr (kScaled) {
    __syncthreads();  // the rotated k row, written by every thread of the block, is whole
    uint8_t* blk = token_scaled_block(kv, t, i, pos);
    const int lane = threadIdx.x & 31, n_warps = static_cast<int>(blockDim.x >> 5);
    const int row_slot = (pos % P) * 2;
    for (int64_t h = threadIdx.x >> 5; h < n_heads; h += n_warps) {
      encode_scaled_row<kElem>(row + h * head_dim, blk + h * kv.head_stride, row_slot, head_dim, kv.scales_offset, lane);
      encode_scaled_row<kElem>(v.p + i * v.stride + h * head_dim, blk + h * kv.head_stride, row_slot + 1, head_dim,
                               kv.scales_offset, lane);
    }
  } else {
    copy_v_row<T>(slot, v, i, head_dim, P);
  }
}

// Qwen3.5's q / k head norms, their partial RoPE and the K / V write in one launch (plain f32 /
// f16 / bf16 pages: T; scaled fp8 / int8 / int4 pages: kElem, T unused). grid (n tokens, 2):
// block (i, 0) takes token i's q heads (read from q_src, one strided row a head, written to q),
// block (i, 1) its k heads (in place, and converted into the page slot, or encoded by the warp
// from its staged row: encode_scaled_row), then writes its V row (scaled: a warp a head). A warp takes a head: lane l sums the squares of elements
// l, l + 32, ... in double and a butterfly adds the lanes; inv = 1 / sqrt(sum / head_dim + eps) and
// each element x · inv · w as rms_norm_kernel computes them; the head is staged in the warp's
// shared row, its first rot_dims rotated with rope.cuh's arithmetic (cos / sin once a block, at
// rot_dims as rope_partial_kernel), then written out. Cost: one read and one write of q, k, v.
constexpr int kQkNormWarps = 8;
constexpr int kMaxQkNormHeadDim = 512;
template <typename T, KvElem kElem = KvElem::kF32>
__global__ void __launch_bounds__(kQkNormWarps * 32)
    qk_norm_rope_kv_write_kernel(CRows q_src, Rows q, Rows k, CRows v, const float* __restrict__ q_norm,
                                 const float* __restrict__ k_norm, float eps, int head_dim, int rot_dims, float theta,
                                 bool neox, KvLayerView kv, StepTables t) {
  pdl_launch_dependents();  // the next kernel may be scheduled now
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  __shared__ RopeCs cs[kMaxQkNormHeadDim / 2];
  __shared__ float staged[kQkNormWarps][kMaxQkNormHeadDim];  // [warp][head_dim]
  const int64_t i = blockIdx.x;
  const bool is_k = blockIdx.y == 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int half = rot_dims / 2;
  const int32_t pos = t.positions[i];
  for (int ii = threadIdx.x; ii < half; ii += blockDim.x) cs[ii] = rope_cs(pos, ii, rot_dims, theta);
  constexpr bool kScaled = kv_elem_scaled(kElem);
  T* slot = is_k && !kScaled ? token_k_slot<T>(kv, t, i, pos, head_dim) : nullptr;
  uint8_t* blk = is_k && kScaled ? token_scaled_block(kv, t, i, pos) : nullptr;
  const int P = kv.page_tokens;
  const int row_slot = (pos % P) * 2;  // scaled pages: the token's K row (its V row: + 1)
  __syncthreads();
  const int64_t n_heads = (is_k ? k.cols : q.cols) / head_dim;
  const float* w = is_k ? k_norm : q_norm;
  float* sh = staged[warp];
  for (int64_t h = warp; h < n_heads; h += kQkNormWarps) {
    const float* src = is_k ? k.p + i * k.stride + h * head_dim : q_src.p + (i * n_heads + h) * q_src.stride;
    float* dst = (is_k ? k.p + i * k.stride : q.p + i * q.stride) + h * head_dim;
    double ss = 0.0;
    for (int d = lane; d < head_dim; d += 32) {
      const double x = src[d];
      ss += x * x;
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float inv =
        static_cast<float>(1.0 / sqrt(ss / static_cast<double>(head_dim) + static_cast<double>(eps)));
    for (int d = lane; d < head_dim; d += 32)
      sh[d] = w ? __fmul_rn(__fmul_rn(src[d], inv), w[d]) : __fmul_rn(src[d], inv);
    __syncwarp();
    for (int ii = lane; ii < half; ii += 32) {
      const int oa = rope_off_a(ii, half, neox), ob = rope_off_b(ii, half, neox);
      const float va = sh[oa], vb = sh[ob];
      sh[oa] = rope_a(va, vb, cs[ii]);
      sh[ob] = rope_b(va, vb, cs[ii]);
    }
    __syncwarp();
    for (int d = lane; d < head_dim; d += 32) {  // a lane writes only the elements it read
      const float y = sh[d];
      dst[d] = y;
      if constexpr (!kScaled) {
        if (is_k) slot[h * P * 2 * head_dim + d] = from_f<T>(y);
      }
    }
    if constexpr (kScaled) {
      if (is_k)  // warp-uniform; sh is whole since the RoPE's __syncwarp
        encode_scaled_row<kElem>(sh, blk + h * kv.head_stride, row_slot, head_dim, kv.scales_offset, lane);
    }
    __syncwarp();  // the warp's next head rewrites sh
  }
  if (!is_k) return;
  if constexpr (kScaled) {
    for (int64_t h = warp; h < n_heads; h += kQkNormWarps)
      encode_scaled_row<kElem>(v.p + i * v.stride + h * head_dim, blk + h * kv.head_stride, row_slot + 1, head_dim,
                               kv.scales_offset, lane);
  } else {
    copy_v_row<T>(slot, v, i, head_dim, P);
  }
}

// ---- attention -----------------------------------------------------------------------------

// f(std::integral_constant<int, k>{}) for k in [0, N): compile-time indices (immediates).
template <typename F, int... K>
__device__ __forceinline__ void static_for_impl(F&& f, std::integer_sequence<int, K...>) {
  (f(std::integral_constant<int, K>{}), ...);
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_impl(f, std::make_integer_sequence<int, N>{});
}

// One key's K and V pieces of a lane: NCH chunks of CB bytes at src + OFF (K) and
// src + OFF + VOFF (V) to dst + c * kThreads * CB (K) and dst + (NCH + c) * kThreads * CB (V).
template <int CB, int NCH, int OFF, int VOFF>
__device__ __forceinline__ void issue_rows(uint32_t dst, const char* src, bool ok) {
  if constexpr (NCH >= 1) {
    cp_async<CB, OFF>(dst, src, ok);
    cp_async<CB, OFF + VOFF>(dst + NCH * kThreads * CB, src, ok);
  }
  if constexpr (NCH >= 2) {
    cp_async<CB, OFF + CB>(dst + kThreads * CB, src, ok);
    cp_async<CB, OFF + VOFF + CB>(dst + (NCH + 1) * kThreads * CB, src, ok);
  }
  static_assert(NCH <= 2, "rows of at most 32 bytes per lane");
}

// The decode kernel's layout for (storage type, head_dim, MAXG). A K / V row is split over
// L = D / 8 lanes, 8 consecutive elements each; a warp holds NSUB = 32 / L such sub-groups.
// A sub-group keeps MG query heads (MAXG, or 4 of 8 when two sub-groups share a key: HS = 2),
// so q and the accumulators take 2 * MG * 8 registers (64, except head_dim 256 with G 8); the
// warp's NKG = NSUB / HS key groups score their own keys, U per tile: a warp tile is
// W = NKG * U consecutive keys, key group k taking keys u * NKG + k. The tile's NV = MG * U
// partial dots of a sub-group reduce by a transposing butterfly (NV - 1 shuffles, then log2(R)
// plain steps: lane li ends with score li / R, R = L / NV, head (li / R) / U, key (li / R) % U),
// and its NV probabilities are broadcast back (NV shuffles). Rows travel global -> shared
// with cp.async through a ring of S tiles per lane (each lane copies exactly the bytes it
// reads back: no barrier, the ring is lane-private), S - 1 tiles in flight while one is computed.
template <typename T, int D, int MAXG>
struct DecodeTiling {
  // kScaled: fp8 / int8 rows, the f16 row scales applied to the score (K) and probability (V).
  // kInt4: rows of D / 2 bytes, dequantized (m + d u) in registers; lane li holds elements
  // [4 li, 4 li + 4) and [D/2 + 4 li, D/2 + 4 li + 4) (elem_index).
  static constexpr bool kScaled = std::is_same_v<T, Fp8> || std::is_same_v<T, Int8>;
  static constexpr bool kInt4 = std::is_same_v<T, Int4>;
  static constexpr bool kHasScales = kScaled || kInt4;
  static constexpr int kElemBytes = kHasScales ? 1 : static_cast<int>(sizeof(T));  // page_elems' unit
  static constexpr int kRowBytes = kInt4 ? D / 2 : D * kElemBytes;                   // one K or V row
  static constexpr int kScaleTok = kInt4 ? 8 : kScaled ? 4 : 0;                     // a token's K|V scales
  static constexpr int E = 8;
  static constexpr int L = D / E;
  static constexpr int NSUB = 32 / L;
  // G 5..8 with two sub-groups per warp: the two take the same keys and 4 heads each (q and
  // the accumulators stay at 64 registers; each row is loaded twice by one instruction, which
  // coalesces), so HS sub-groups share a key and a warp scores NKG keys at once.
  static constexpr int HS = (MAXG == 8 && NSUB >= 2) ? 2 : 1;
  static constexpr int MG = MAXG / HS;  // query heads per sub-group
  static constexpr int NKG = NSUB / HS;
  // 4 keys per sub-group and tile where the registers allow (16-bit / fp8 rows), else 2; a
  // block tile (kWarps * W keys) stays within 32.
  static constexpr int U = (kElemBytes <= 2 && MG * E <= 32 && kWarps * NKG * 4 <= 32 && MG * 4 <= L) ? 4 : 2;
  static constexpr int W = NKG * U;
  static constexpr int NV = MG * U;
  static constexpr int R = L / NV;
  static constexpr int RB = kRowBytes / L;  // bytes of one row per lane
  static constexpr int CB = RB < 16 ? RB : 16;  // bytes per cp.async
  static constexpr int NCH = RB / CB;
  static constexpr int CPT = U * 2 * NCH;  // cp.async chunks per lane per tile (K and V rows)
  static constexpr int kTileBytes = CPT * CB;
  static constexpr int kSlotBytes = kTileBytes + U * kScaleTok;  // per lane and ring slot (+ scales)
  static constexpr int S = 48 * 1024 / (kThreads * kSlotBytes) > 8 ? 8 : 48 * 1024 / (kThreads * kSlotBytes);
  static constexpr int kRingBytes = S * kTileBytes * kThreads;
  static constexpr int kScaleBytes = S * U * kScaleTok * kThreads;  // the keys' K|V scales
  static constexpr int NSG = kWarps * NKG;                              // key sub-groups per block
  static constexpr int kMergeBytes = NSG * MAXG * (D + 2) * 4;
  static constexpr int kSmem = kRingBytes + kScaleBytes > kMergeBytes ? kRingBytes + kScaleBytes : kMergeBytes;
  static constexpr int kMinBlocks = MG * E > 32 ? 2 : 4;  // <= 128 registers unless q + acc alone take 128
  static_assert(L >= 2 && L <= 32 && 32 % L == 0 && NV <= L && L % NV == 0, "sub-group layout");
  static_assert(RB >= 4 && RB % CB == 0 && (CB == 4 || CB == 8 || CB == 16), "cp.async sizes");
  static_assert(kWarps * W <= 32 && 32 % (kWarps * W) == 0, "plan_attention_split's runs are whole block tiles");
  static_assert(S >= 2 && kSmem <= 48 * 1024, "static shared memory");
  // The row element lane li's register e stands for.
  static __device__ __forceinline__ int elem_index(int li, int e) {
    if constexpr (kInt4) return e < 4 ? 4 * li + e : D / 2 + 4 * li + (e - 4);
    return li * E + e;
  }
};

// grid (n tokens, n_kv heads, n_splits), kThreads threads. MAXG >= group: query heads are
// kept in registers; heads g >= group run with q = 0 and are not written. T: float, __half,
// __nv_bfloat16 (plain pages) or Fp8 (scaled pages, KvLayerView).
template <typename T, int D, int MAXG>
__global__ void __launch_bounds__(kThreads, DecodeTiling<T, D, MAXG>::kMinBlocks) attention_kernel(KernelArgs a) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  using C = DecodeTiling<T, D, MAXG>;
  constexpr int E = C::E, L = C::L, HS = C::HS, MG = C::MG, NKG = C::NKG, U = C::U, W = C::W, NV = C::NV, R = C::R;
  constexpr int S = C::S;
  constexpr int RB = C::RB, CB = C::CB, NCH = C::NCH, CPT = C::CPT, NSG = C::NSG;
  constexpr bool kScaled = C::kScaled, kInt4 = C::kInt4, kHasScales = C::kHasScales;
  constexpr int kScaleTok = C::kScaleTok;
  constexpr unsigned kAll = 0xffffffffu;
  constexpr int kStep = kWarps * W;  // keys between a warp's consecutive tiles
  __shared__ __align__(16) unsigned char smem[C::kSmem];

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int sub = lane / L, li = lane % L;
  const int kg = sub / HS, hg = sub % HS;  // key group; head group: heads hg * MG + [0, MG)
  const int my_u = (li / R) % U;  // the key of the score this lane holds after the reduction
  const int64_t i = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int G = a.group;

  const RowKeys rk = row_keys(a, i, kvh);
  const int32_t pos = rk.pos;
  const int32_t first = rk.first;
  const int32_t begin = first + split * a.split_len;
  const int32_t end = min(pos + 1, begin + a.split_len);  // may be <= begin: empty run

  // q prescaled by scale * log2(e): scores in log2 units, probabilities 2^(s - m).
  float q[MG][E], acc[MG][E];
  const float qs = a.scale * kLog2e;
#pragma unroll
  for (int g = 0; g < MG; ++g) {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      acc[g][e] = 0.0f;
      q[g][e] = 0.0f;
    }
    if (hg * MG + g < G) {
      const float* qr = a.q.p + i * a.q.stride + static_cast<int64_t>(kvh * G + hg * MG + g) * D;
#pragma unroll
      for (int e = 0; e < E; ++e) q[g][e] = qr[C::elem_index(li, e)] * qs;
    }
  }

  // Addresses: this lane's piece of token tp's K row of page pg is at
  // row0 + pg * page_bytes + tp * 2 * row_bytes (V: + row_bytes); scales (K, V) at
  // sc0 + pg * page_bytes + kScaleTok * tp. Pages are < 4 GiB (32-bit page_bytes, 64-bit products).
  // A hot row's slot s of kv head kvh is at sp_base + kvh * sp_head_bytes + s * sp_page_bytes,
  // laid out as the page's head block (offset 0 inside its "page").
  const char* kv = rk.hot ? a.sp_base + kvh * a.sp_head_bytes : static_cast<const char*>(a.kv.base);
  const int32_t* pages = rk.pages;
  const uint32_t page_bytes = rk.hot ? a.sp_page_bytes : static_cast<uint32_t>(a.kv.page_elems * C::kElemBytes);
  const int64_t head_off = rk.hot ? 0
                           : kHasScales ? kvh * a.kv.head_stride
                                        : static_cast<int64_t>(kvh) * a.kv.page_tokens * 2 * D * C::kElemBytes;
  const char* row0 = kv + head_off + li * RB;
  const char* sc0 = kv + head_off + a.kv.scales_offset;
  const uint32_t tp_mask = static_cast<uint32_t>(a.kv.page_tokens - 1);
  const uint32_t page_shift = static_cast<uint32_t>(a.page_shift);
  constexpr uint32_t kRowStride = 2 * C::kRowBytes;
  // Warp tiles are W-aligned: with pages of >= W tokens a tile lies in one page (one page
  // index per tile, the rows at constant offsets); smaller pages look up each key's page.
  const bool tile_in_page = a.kv.page_tokens >= W;

  // Tiles from begin rounded down to W (keys before begin are masked like those past end).
  const int32_t begin_al = begin & ~(W - 1);
  const int32_t n_keys = end - begin_al;
  const int n_t = begin < end && n_keys > warp * W ? (n_keys - warp * W + kStep - 1) / kStep : 0;  // this warp's tiles
  // Key u of this lane in the warp tile starting at jt: jt + u * NKG + kg.
  const int32_t jt0 = begin_al + warp * W;
  const uint32_t n_run = begin < end ? static_cast<uint32_t>(end - begin) : 0u;
  auto in_run = [&](int32_t j) { return static_cast<uint32_t>(j - begin) < n_run; };

  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + tid * CB;
  const uint32_t sring = static_cast<uint32_t>(__cvta_generic_to_shared(smem + C::kRingBytes)) + tid * U * kScaleTok;
  const unsigned char* ring_rd = smem + tid * CB;
  const unsigned char* sring_rd = smem + C::kRingBytes + tid * U * kScaleTok;

  // The page(s) of the tile at jt (-1: nothing of it to read). tile_in_page: pg[0] is the page
  // of the tile's first key in the run; else pg[u] is that of this lane's key u.
  auto pages_of = [&](int32_t jt, int32_t(&pg)[U]) {
    if (tile_in_page) {
      const int32_t j = max(jt, begin);
      pg[0] = j < end && jt + W > begin ? __ldg(pages + (static_cast<uint32_t>(j) >> page_shift)) : -1;
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int32_t j = jt + u * NKG + kg;
        pg[u] = in_run(j) ? __ldg(pages + (static_cast<uint32_t>(j) >> page_shift)) : -1;
      }
    }
  };
  // cp.async the K / V rows (fp8: and scales) of the tile at jt into ring slot `slot`; keys
  // outside the run are zero-filled, their rows not read.
  auto issue = [&](int32_t jt, int slot, const int32_t(&pg)[U]) {
    const uint32_t dst = ring + slot * (CPT * kThreads * CB);
    const uint32_t sdst = sring + slot * (kThreads * U * kScaleTok);
    if (tile_in_page) {
      const uint32_t page = pg[0] >= 0 ? static_cast<uint32_t>(pg[0]) : 0u;  // page 0: a valid address, not read
      const uint32_t tp = (static_cast<uint32_t>(jt) & tp_mask) + kg;       // this lane's key 0
      const char* row = row0 + static_cast<uint64_t>(page) * page_bytes + tp * kRowStride;
      const char* sc = sc0 + static_cast<uint64_t>(page) * page_bytes + kScaleTok * tp;
      static_for<U>([&](auto uc) {
        constexpr int u = decltype(uc)::value;
        const bool ok = in_run(jt + u * NKG + kg);
        issue_rows<CB, NCH, u * NKG * kRowStride, C::kRowBytes>(dst + 2 * u * NCH * kThreads * CB, row, ok);
        if constexpr (kHasScales) cp_async<kScaleTok, kScaleTok * u * NKG>(sdst + u * kScaleTok, sc, ok);
      });
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const bool ok = pg[u] >= 0;
        const uint32_t page = ok ? static_cast<uint32_t>(pg[u]) : 0u;
        const uint32_t tp = static_cast<uint32_t>(jt + u * NKG + kg) & tp_mask;
        const char* row = row0 + static_cast<uint64_t>(page) * page_bytes + tp * kRowStride;
        issue_rows<CB, NCH, 0, C::kRowBytes>(dst + 2 * u * NCH * kThreads * CB, row, ok);
        if constexpr (kHasScales)
          cp_async<kScaleTok>(sdst + u * kScaleTok, sc0 + static_cast<uint64_t>(page) * page_bytes + kScaleTok * tp, ok);
      }
    }
  };

  int32_t pg[U];
  int32_t jt = jt0;  // first key of the next tile to issue
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    pages_of(jt, pg);
    if (s < n_t) issue(jt, s, pg);
    cp_async_commit();
    jt += kStep;
  }
  pages_of(jt, pg);

  float m_mine = -FLT_MAX;  // reference max of this lane's head (finite: 2^(-inf - m) = 0)
  float l_mine = 0.0f;      // sum of the probabilities of the scores this lane held
  int ws = S - 1, rs = 0;   // ring slots: next to fill, next to read
  int32_t jc = jt0;         // first key of the tile computed
  for (int t = 0; t < n_t; ++t) {
    if (t + S - 1 < n_t) issue(jt, ws, pg);
    cp_async_commit();
    ws = ws + 1 == S ? 0 : ws + 1;
    jt += kStep;
    pages_of(jt, pg);        // used by the next iteration's issue
    cp_async_wait<S - 1>();  // tile t (this lane's own copies) landed

    uint32_t kw[U][RB / 4], vw[U][RB / 4];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const unsigned char* kp = ring_rd + ((rs * CPT + (2 * u) * NCH + c) * kThreads) * CB;
        const unsigned char* vp = ring_rd + ((rs * CPT + (2 * u + 1) * NCH + c) * kThreads) * CB;
        if constexpr (CB == 16) {
          *reinterpret_cast<uint4*>(&kw[u][c * 4]) = *reinterpret_cast<const uint4*>(kp);
          *reinterpret_cast<uint4*>(&vw[u][c * 4]) = *reinterpret_cast<const uint4*>(vp);
        } else if constexpr (CB == 8) {
          *reinterpret_cast<uint2*>(&kw[u][0]) = *reinterpret_cast<const uint2*>(kp);
          *reinterpret_cast<uint2*>(&vw[u][0]) = *reinterpret_cast<const uint2*>(vp);
        } else {
          kw[u][0] = *reinterpret_cast<const uint32_t*>(kp);
          vw[u][0] = *reinterpret_cast<const uint32_t*>(vp);
        }
      }
    float dk = 1.0f, dv = 1.0f;  // fp8 / int8: the K / V scales of this lane's key my_u
    uint2 sc4[kInt4 ? U : 1];     // int4: every key's (d, m) of K (.x) and V (.y), f16 pairs
    if constexpr (kInt4) {
#pragma unroll
      for (int u = 0; u < U; ++u) sc4[u] = reinterpret_cast<const uint2*>(sring_rd + rs * kThreads * U * 8)[u];
    }
    if constexpr (kScaled) {
      uint32_t sc[U];
#pragma unroll
      for (int u = 0; u < U; ++u) sc[u] = reinterpret_cast<const uint32_t*>(sring_rd + rs * kThreads * U * 4)[u];
      uint32_t mine = sc[0];
#pragma unroll
      for (int u = 1; u < U; ++u) mine = my_u == u ? sc[u] : mine;
      dk = attn::f16_lo(mine);
      dv = attn::f16_hi(mine);
    }
    rs = rs + 1 == S ? 0 : rs + 1;

    // Keys outside the run (zero-filled rows) score -inf.
    float bias[U];
#pragma unroll
    for (int u = 0; u < U; ++u) bias[u] = in_run(jc + u * NKG + kg) ? 0.0f : -INFINITY;
    jc += kStep;

    // Partial dots x[g * U + u] over this lane's E elements.
    float x[NV];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[E];
      widen<T, E>(kw[u], kf);
      if constexpr (kInt4) dequant4(kf, sc4[u].x);
#pragma unroll
      for (int g = 0; g < MG; ++g) {
        float d = kScaled ? 0.0f : bias[u];
#pragma unroll
        for (int e = 0; e < E; ++e) d = fmaf(q[g][e], kf[e], d);
        x[g * U + u] = d;
      }
    }
    // Transposing butterfly: each level halves the values a lane keeps (the upper half on
    // lanes with the level's bit set) and adds the partner's other half.
#pragma unroll
    for (int lvl = 1; lvl < NV; lvl <<= 1) {
      const int h = NV / (2 * lvl), off = L / (2 * lvl);
      const bool hi = (li & off) != 0;
#pragma unroll
      for (int k = 0; k < NV / 2; ++k) {
        if (k >= h) break;
        const float send = hi ? x[k] : x[k + h];
        const float keep = hi ? x[k + h] : x[k];
        x[k] = keep + __shfl_xor_sync(kAll, send, off);
      }
    }
#pragma unroll
    for (int off = R / 2; off >= 1; off >>= 1) x[0] += __shfl_xor_sync(kAll, x[0], off);
    float s = x[0];
    if constexpr (kScaled) {
      float b = bias[0];
#pragma unroll
      for (int u = 1; u < U; ++u) b = my_u == u ? bias[u] : b;
      s = fmaf(s, dk, b);
    }

    // Online softmax with a lagging reference max: rescale only when a score passes it by kSlack.
    if (__any_sync(kAll, s > m_mine + kSlack)) {
      float mx = s;
#pragma unroll
      for (int off = 1; off < R * U; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, off));
      const float mn = fmaxf(m_mine, mx);
      const float corr = fast_exp2(m_mine - mn);
      m_mine = mn;
      l_mine *= corr;
#pragma unroll
      for (int g = 0; g < MG; ++g) {
        const float cg = __shfl_sync(kAll, corr, g * U * R, L);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] *= cg;
      }
    }
    const float p = fast_exp2(s - m_mine);
    l_mine += p;
    const float pv = kScaled ? p * dv : p;
    float pb[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) pb[k] = __shfl_sync(kAll, pv, k * R, L);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[E];
      widen<T, E>(vw[u], vf);
      if constexpr (kInt4) dequant4(vf, sc4[u].y);
#pragma unroll
      for (int g = 0; g < MG; ++g)
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] = fmaf(pb[g * U + u], vf[e], acc[g][e]);
    }
  }
  cp_async_wait<0>();

  // Head g's (max, sum) of the sub-group: lanes [g * U * R, (g + 1) * U * R) hold its scores
  // (R copies of each).
  float lsum = l_mine;
#pragma unroll
  for (int off = 1; off < R * U; off <<= 1) lsum += __shfl_xor_sync(kAll, lsum, off);
  lsum *= 1.0f / R;

  // Merge the sub-groups through shared memory (over the ring, once every warp is done with
  // it): [NSG][MAXG] max / sum, [NSG][MAXG][D] acc.
  __syncthreads();
  float* sm_m = reinterpret_cast<float*>(smem);
  float* sm_l = sm_m + NSG * MAXG;
  float* sm_acc = sm_l + NSG * MAXG;
  const int sgi = warp * NKG + kg;
  if (li % (U * R) == 0) {
    sm_m[sgi * MAXG + hg * MG + li / (U * R)] = m_mine;
    sm_l[sgi * MAXG + hg * MG + li / (U * R)] = lsum;
  }
#pragma unroll
  for (int g = 0; g < MG; ++g)
#pragma unroll
    for (int e = 0; e < E; e += 4)
      *reinterpret_cast<float4*>(&sm_acc[(sgi * MAXG + hg * MG + g) * D + C::elem_index(li, e)]) =
          make_float4(acc[g][e], acc[g][e + 1], acc[g][e + 2], acc[g][e + 3]);
  __syncthreads();

  attn::write_merged<NSG, MAXG, kThreads>(a, sm_m, sm_l, sm_acc, D, i, kvh, split, tid);
}

// grid (n tokens, n_kv heads * G), kThreads threads: combines the runs of one (token, query
// head) — those that intersect [first, pos]; later runs are empty — as backend/cpu's
// attention_merge does. The run weights exp(max_p - max) are computed once into shared
// memory (block reductions of the max and the weighted sum), then each thread sums its output
// elements over the runs with independent loads (one block per query head: a long context's
// 64+ runs merge in a few microseconds; one block per kv head looping over runs serially
// took ~100 us per layer at 32K keys).
constexpr int kMaxRuns = 1024;  // plan_attention_split never makes more

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  __syncthreads();  // red is reused
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
  return v;
}

__global__ void __launch_bounds__(kThreads) merge_kernel(KernelArgs a, int D) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  __shared__ float wt[kMaxRuns];
  __shared__ float red[kWarps];
  const int64_t i = blockIdx.x;
  const int G = a.group;
  const int kvh = blockIdx.y / G, g = blockIdx.y % G;
  const RowKeys rk = row_keys(a, i, kvh);
  const int32_t range = rk.pos + 1 - rk.first;
  const int n_runs = min(a.n_splits, (range + a.split_len - 1) / a.split_len);
  const int64_t p0 = (i * a.kv.n_kv_heads + kvh) * a.n_splits;
  float mx = -INFINITY;
  for (int p = threadIdx.x; p < n_runs; p += kThreads) mx = fmaxf(mx, a.part_max[(p0 + p) * G + g]);
  mx = block_reduce(mx, true, red);
  float total = 0.0f;
  for (int p = threadIdx.x; p < n_runs; p += kThreads) {
    const float pm = a.part_max[(p0 + p) * G + g];
    const float w = pm == -INFINITY ? 0.0f : exp2f(pm - mx);  // log2 units; an empty run: its acc holds nothing
    wt[p] = w;
    total += a.part_sum[(p0 + p) * G + g] * w;
  }
  total = block_reduce(total, false, red);  // its barriers also publish wt
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float o = 0.0f;
#pragma unroll 8
    for (int p = 0; p < n_runs; ++p) o += wt[p] * a.part_acc[((p0 + p) * G + g) * D + d];
    a.out.p[i * a.out.stride + static_cast<int64_t>(kvh * G + g) * D + d] = o * inv;
  }
}

template <typename T, int D>
cudaError_t launch_group(const KernelArgs& a, dim3 grid, cudaStream_t s) {
  if (a.group <= 1) {
    launch_chain(attention_kernel<T, D, 1>, grid, kThreads, 0, s, a);
  } else if (a.group <= 2) {
    launch_chain(attention_kernel<T, D, 2>, grid, kThreads, 0, s, a);
  } else if (a.group <= 4) {
    launch_chain(attention_kernel<T, D, 4>, grid, kThreads, 0, s, a);
  } else {
    launch_chain(attention_kernel<T, D, 8>, grid, kThreads, 0, s, a);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_dim(const KernelArgs& a, int head_dim, dim3 grid, cudaStream_t s) {
  switch (head_dim) {
    case 64: return launch_group<T, 64>(a, grid, s);
    case 128: return launch_group<T, 128>(a, grid, s);
    case 256: return launch_group<T, 256>(a, grid, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_kv_write(KvLayerView kv, StepTables t, CRows k, CRows v, cudaStream_t s) {
  if (k.rows <= 0 || kv.n_kv_heads <= 0 || kv.head_dim <= 0) return cudaSuccess;
  if (k.rows > 0x7fffffff || kv.n_kv_heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(k.rows), static_cast<unsigned>(kv.n_kv_heads));
  const unsigned threads = static_cast<unsigned>(std::min(256, ((kv.head_dim + 31) / 32) * 32));
  if (kv_elem_scaled(kv.elem) && !kv_scaled_layout_ok(kv)) return cudaErrorInvalidValue;
  switch (kv.elem) {
    case KvElem::kF32: launch_chain(kv_write_kernel<float>, grid, threads, 0, s, kv, t, k, v); break;
    case KvElem::kF16: launch_chain(kv_write_kernel<__half>, grid, threads, 0, s, kv, t, k, v); break;
    case KvElem::kBF16: launch_chain(kv_write_kernel<__nv_bfloat16>, grid, threads, 0, s, kv, t, k, v); break;
    case KvElem::kFp8: launch_chain(kv_write_scaled_kernel<KvElem::kFp8>, grid, 64, 0, s, kv, t, k, v); break;
    case KvElem::kInt8: launch_chain(kv_write_scaled_kernel<KvElem::kInt8>, grid, 64, 0, s, kv, t, k, v); break;
    case KvElem::kInt4: launch_chain(kv_write_scaled_kernel<KvElem::kInt4>, grid, 64, 0, s, kv, t, k, v); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_rope_kv_write(Rows q, Rows k, CRows v, int head_dim, float theta, bool neox, KvLayerView kv,
                                 StepTables t, cudaStream_t s) {
  if (k.rows <= 0) return cudaSuccess;
  if (k.rows > 0x7fffffff || q.rows != k.rows || v.rows != k.rows || v.cols != k.cols || head_dim < 2 ||
      head_dim % 2 != 0 || head_dim != kv.head_dim || k.cols != static_cast<int64_t>(kv.n_kv_heads) * head_dim ||
      q.cols % head_dim != 0 || head_dim / 2 > kMaxRopeKvHalf)
    return cudaErrorInvalidValue;
  // Threads: a (head, pair) each of the wider of q / k, up to rope_kv_max_threads (then strided).
  const int64_t pairs = std::max(q.cols, k.cols) / 2;
  const unsigned threads =
      static_cast<unsigned>(std::min<int64_t>(rope_kv_max_threads(kv.elem), (pairs + 31) / 32 * 32));
  const dim3 grid(static_cast<unsigned>(k.rows), 2, 1);
  switch (kv.elem) {
    case KvElem::kF32:
      launch_chain(rope_kv_write_kernel<float>, grid, threads, 0, s, q, k, v, head_dim, theta, neox, kv, t);
      break;
    case KvElem::kF16:
      launch_chain(rope_kv_write_kernel<__half>, grid, threads, 0, s, q, k, v, head_dim, theta, neox, kv, t);
      break;
    case KvElem::kBF16:
      launch_chain(rope_kv_write_kernel<__nv_bfloat16>, grid, threads, 0, s, q, k, v, head_dim, theta, neox, kv, t);
      break;
    case KvElem::kFp8:
      launch_chain(rope_kv_write_kernel<uint8_t, KvElem::kFp8>, grid, threads, 0, s, q, k, v, head_dim, theta, neox, kv,
                   t);
      break;
    case KvElem::kInt8:
      launch_chain(rope_kv_write_kernel<uint8_t, KvElem::kInt8>, grid, threads, 0, s, q, k, v, head_dim, theta, neox,
                   kv, t);
      break;
    case KvElem::kInt4:
      launch_chain(rope_kv_write_kernel<uint8_t, KvElem::kInt4>, grid, threads, 0, s, q, k, v, head_dim, theta, neox,
                   kv, t);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_qk_norm_rope_kv_write(CRows q_src, Rows q, Rows k, CRows v, const float* q_norm,
                                         const float* k_norm, float eps, int head_dim, int rot_dims, float theta,
                                         bool neox, KvLayerView kv, StepTables t, cudaStream_t s) {
  if (k.rows <= 0) return cudaSuccess;
  if (k.rows > 0x7fffffff || q.rows != k.rows || v.rows != k.rows || v.cols != k.cols || head_dim < 2 ||
      head_dim % 2 != 0 || head_dim > kMaxQkNormHeadDim || rot_dims < 2 || rot_dims % 2 != 0 || rot_dims > head_dim ||
      head_dim != kv.head_dim || k.cols != static_cast<int64_t>(kv.n_kv_heads) * head_dim || q.cols % head_dim != 0 ||
      q_src.cols != head_dim || q_src.rows != q.rows * (q.cols / head_dim) ||
      (kv.elem == KvElem::kInt4 && head_dim % 2 != 0))
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(k.rows), 2, 1), block(kQkNormWarps * 32);
  switch (kv.elem) {
    case KvElem::kF32:
      launch_chain(qk_norm_rope_kv_write_kernel<float>, grid, block, 0, s, q_src, q, k, v, q_norm, k_norm, eps,
                   head_dim, rot_dims, theta, neox, kv, t);
      break;
    case KvElem::kF16:
      launch_chain(qk_norm_rope_kv_write_kernel<__half>, grid, block, 0, s, q_src, q, k, v, q_norm, k_norm, eps,
                   head_dim, rot_dims, theta, neox, kv, t);
      break;
    case KvElem::kBF16:
      launch_chain(qk_norm_rope_kv_write_kernel<__nv_bfloat16>, grid, block, 0, s, q_src, q, k, v, q_norm, k_norm,
                   eps, head_dim, rot_dims, theta, neox, kv, t);
      break;
    case KvElem::kFp8:
      launch_chain(qk_norm_rope_kv_write_kernel<uint8_t, KvElem::kFp8>, grid, block, 0, s, q_src, q, k, v, q_norm,
                   k_norm, eps, head_dim, rot_dims, theta, neox, kv, t);
      break;
    case KvElem::kInt8:
      launch_chain(qk_norm_rope_kv_write_kernel<uint8_t, KvElem::kInt8>, grid, block, 0, s, q_src, q, k, v, q_norm,
                   k_norm, eps, head_dim, rot_dims, theta, neox, kv, t);
      break;
    case KvElem::kInt4:
      launch_chain(qk_norm_rope_kv_write_kernel<uint8_t, KvElem::kInt4>, grid, block, 0, s, q_src, q, k, v, q_norm,
                   k_norm, eps, head_dim, rot_dims, theta, neox, kv, t);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

AttnSplit plan_attention_split(int64_t n_tokens, int n_kv_heads, int32_t max_range, int n_sm) {
  AttnSplit sp;
  const int64_t base = std::max<int64_t>(1, n_tokens * n_kv_heads);
  const int64_t target = static_cast<int64_t>(kBlocksPerSm) * std::max(1, n_sm);
  const int64_t range = std::max<int32_t>(1, max_range);
  // Runs of at least kMinSplit keys; at least kMinSplitMany where the step already has many
  // (token, kv head) rows, or the whole range when it is that short (one launch, no merge):
  // measured on the 8B shape (docs/benchmarks.md, session 12) tg128 +0.5-1 %, batched 8 / 64
  // +1.4 / +0.8 %, while batch-1 decode at 2K-4K keys wants the short runs (230 vs 221 t/s).
  // HS_CUDA_ATTN_MIN_SPLIT (keys, >= 32) forces one minimum everywhere, for such measurements.
  static const int64_t forced = [] {
    const char* e = std::getenv("HS_CUDA_ATTN_MIN_SPLIT");
    const long v = e ? std::strtol(e, nullptr, 10) : 0;
    return v >= 32 ? static_cast<int64_t>(v) : int64_t{0};
  }();
  const int64_t min_split =
      forced ? forced : (range <= kMinSplitMany || base >= kManyRows) ? int64_t{kMinSplitMany} : int64_t{kMinSplit};
  int64_t n = 1;
  if (base < target) {
    const int64_t by_len = (range + min_split - 1) / min_split;
    const int64_t by_blocks = (target + base - 1) / base;
    n = std::max<int64_t>(1, std::min({by_len, by_blocks, int64_t{kMaxRuns}}));
  }
  // Runs of a multiple of 32 keys (whole block tiles of every attention_kernel instance: no
  // masked keys at a run's start without a window), then as few runs as that length needs.
  int64_t len = (range + n - 1) / n;
  len = (len + kWarps * 8 - 1) / (kWarps * 8) * (kWarps * 8);
  sp.split_len = static_cast<int>(len);
  sp.n_splits = static_cast<int>((range + len - 1) / len);
  return sp;
}

size_t attention_scratch_floats(int64_t n_tokens, int n_kv_heads, int group, int head_dim, AttnSplit split) {
  if (split.n_splits <= 1) return 0;
  const size_t parts = static_cast<size_t>(n_tokens) * n_kv_heads * split.n_splits * group;
  return parts * (2 + static_cast<size_t>(head_dim));
}

bool attention_shape_supported(int head_dim, int group) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && group >= 1 && group <= 8;
}

cudaError_t launch_attention(KvLayerView kv, StepTables t, CRows q, Rows out, const AttnArgs& a, cudaStream_t s) {
  if (q.rows <= 0) return cudaSuccess;
  if (a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0 || a.n_head_kv != kv.n_kv_heads || a.head_dim != kv.head_dim)
    return cudaErrorInvalidValue;
  const int group = a.n_head / a.n_head_kv;
  if (!attention_shape_supported(a.head_dim, group)) return cudaErrorInvalidValue;
  if (kv_elem_scaled(kv.elem) && !kv_scaled_layout_ok(kv)) return cudaErrorInvalidValue;
  if (kv.page_tokens <= 0 || (kv.page_tokens & (kv.page_tokens - 1)) != 0) return cudaErrorInvalidValue;
  // The kernel's cp.async rows need 16-byte aligned pages and 32-bit page byte sizes.
  const int64_t elem_bytes = kv_elem_unit_bytes(kv.elem);
  if (reinterpret_cast<uintptr_t>(kv.base) % 16 != 0 || kv.page_elems <= 0 || (kv.page_elems * elem_bytes) % 16 != 0 ||
      kv.page_elems * elem_bytes > 0xffffffffLL)
    return cudaErrorInvalidValue;
  if (q.rows > 0x7fffffff || a.n_head_kv > 65535 || a.split.n_splits < 1 || a.split.n_splits > 65535 ||
      a.split.split_len < 1 || a.split.n_splits > kMaxRuns || (a.split.n_splits > 1 && a.scratch == nullptr))
    return cudaErrorInvalidValue;

  KernelArgs ka;
  ka.kv = kv;
  ka.t = t;
  ka.q = q;
  ka.out = out;
  ka.group = group;
  ka.scale = a.scale;
  ka.window = a.window;
  ka.n_splits = a.split.n_splits;
  ka.page_shift = 0;
  while ((1 << ka.page_shift) < kv.page_tokens) ++ka.page_shift;
  ka.split_len = a.split.split_len;
  ka.sp_pages = a.sp_pages;
  ka.sp_len = a.sp_len;
  ka.sp_stride = a.sp_stride;
  if (a.sp_base && (reinterpret_cast<uintptr_t>(a.sp_base) % 16 != 0 || a.sp_page_bytes % 16 != 0 || a.sp_head_bytes % 16 != 0 ||
                    a.sp_page_bytes <= 0 || a.sp_page_bytes > 0xffffffffLL || !a.sp_pages))
    return cudaErrorInvalidValue;
  ka.sp_base = static_cast<const char*>(a.sp_base);
  ka.sp_head_bytes = a.sp_head_bytes;
  ka.sp_page_bytes = static_cast<uint32_t>(a.sp_page_bytes);
  const size_t parts = static_cast<size_t>(q.rows) * a.n_head_kv * a.split.n_splits * group;
  ka.part_max = a.scratch;
  ka.part_sum = a.scratch ? a.scratch + parts : nullptr;
  ka.part_acc = a.scratch ? a.scratch + 2 * parts : nullptr;

  const dim3 grid(static_cast<unsigned>(q.rows), static_cast<unsigned>(a.n_head_kv),
                  static_cast<unsigned>(a.split.n_splits));
  cudaError_t err = cudaErrorInvalidValue;
  bool launched = false;
  if (attn::attention_mma_takes(kv.elem, a.head_dim, group, kv.page_tokens)) {
    err = attn::launch_attention_mma(ka, kv.elem, a.head_dim, grid, s);
    launched = err != cudaErrorNotSupported;  // not: the device's blocks lack its shared memory
  }
  if (!launched) {
    switch (kv.elem) {
      case KvElem::kF32: err = launch_dim<float>(ka, a.head_dim, grid, s); break;
      case KvElem::kF16: err = launch_dim<__half>(ka, a.head_dim, grid, s); break;
      case KvElem::kBF16: err = launch_dim<__nv_bfloat16>(ka, a.head_dim, grid, s); break;
      case KvElem::kFp8: err = launch_dim<Fp8>(ka, a.head_dim, grid, s); break;
      case KvElem::kInt8: err = launch_dim<Int8>(ka, a.head_dim, grid, s); break;
      case KvElem::kInt4: err = launch_dim<Int4>(ka, a.head_dim, grid, s); break;
    }
  }
  if (err != cudaSuccess || ka.n_splits == 1) return err;
  launch_chain(merge_kernel, dim3(static_cast<unsigned>(q.rows), static_cast<unsigned>(a.n_head)), kThreads, 0, s,
               ka, a.head_dim);
  return cudaGetLastError();
}

}  // namespace hs::cuda
