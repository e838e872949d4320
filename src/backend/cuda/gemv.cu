// backend/cuda/gemv.cu — decode GEMV on quantized (Q4_0, Q8_0, Q4_K) and 16-bit weights, the
// quantized embedding gather and the quantized -> f16 dequantization (gemv_kernels.h).
//
// GEMV (y[t][r] = sum_c W[r][c] x[t][c], 1..8 tokens t) runs on the tensor cores with the
// weights as the A operand of mma.m16n8k16 and the tokens as its 8 columns, so all tokens
// share one pass over the weights:
//  * A warp owns 32 weight rows (two m16 tiles); lane (g = lane / 4, t = lane % 4) holds rows
//    g, g+8, g+16, g+24. A *group* (quant_layout.h: 4 Q4 blocks, 2 Q8 blocks, or 32 columns of
//    f16 / bf16) is one 16-byte load per lane per row: the quad t = 0..3 reads 64 contiguous
//    bytes of each row, a warp 32 rows x 64 bytes. Loads are ld.global.nc, L1::no_allocate,
//    L2::256B (the next groups of the row arrive in L2 with the first); each lane keeps kDepth
//    groups in registers (2 for Q4_0 / Q4_K, 3 for Q8_0 / f16 / bf16: 8-12 16-byte loads) and
//    refills a buffer as soon as its group is consumed.
//  * Quants become exact f16 in registers: a nibble / byte is OR-ed into the mantissa of 1024
//    (0x6400) and 1024 (+ 8 or + 128) is subtracted with one HADD2 / HFMA2 per 2 weights; f16 /
//    bf16 weights are used as loaded.
//  * x is staged once per CTA in shared memory, already in B-fragment order: f16 weights take
//    x * 2^e (e per token and CTA: max |x| -> [2^14, 2^15)) split into hi + lo f16, bf16
//    weights hi + mid + lo bf16. One A fragment holds two k-steps (8 columns each) of a
//    16-row tile and is used once per x term, so a 32-column block is 4 (f16) or 6 (bf16)
//    mmas per tile, chained from zero.
//  * Block scales are applied in fp32 per 32 columns: acc += d * C_block. Q4_K's mins enter as
//    dmin * sum_j m_j * sum(x over sub-block j): one m16n8k8 per group and tile over the
//    staged per-sub-block sums of x.
//  * A CTA (8 warps) covers 32 * rw rows and one slice of columns; its rw x (8 / rw) warps
//    split rows x groups; partial sums meet in shared memory in a fixed order, and the ck
//    slices of a row block (one thread-block cluster) through distributed shared memory.
// Precision: see gemv_kernels.h (~2^-22 relative per x element for f16 / quant weights, 2^-24
// for bf16; fp32 sums). Cost: one read of the weights; x (4 bytes per element and token, 6
// for bf16) read twice per CTA from L2. Main loop, per warp and group (ptxas 13.0 SASS):
// Q4_0 330 instructions per 2304 bytes, Q8_0 217 / 2176, Q4_K 432 / 2368, f16 131 / 2048,
// bf16 152 / 2048: at 4.3 TB/s that is 59 %, 41 %, 75 %, 26 % and 31 % of the SMs' issue
// rate, independent of the number of tokens (the 8 mma columns are always computed).
//
// Dequantization (to f16 for cuBLAS) and the embedding gather: one thread per 32-column block,
// the ggml formulas in fp32 (__fmul_rn / __fsub_rn: no contraction), 16-byte stores.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/quant_decode.cuh"
#include "backend/cuda/smem_limit.h"
#include "backend/cuda/weight_loads.cuh"

namespace hs::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;         // 8 warps per CTA
constexpr int kWarps = kThreads / 32;
constexpr int kWarpRows = 32;         // weight rows per warp (two m16 tiles)
constexpr size_t kRedBytes = size_t{kWarps} * kWarpRows * kMaxGemvRows * sizeof(float);  // epilogue partials
constexpr size_t kMaxSmem = 200 * 1024;  // dynamic shared memory cap of one CTA

// ---- weight kinds ------------------------------------------------------------------------

enum Kind : int { kQ40 = 0, kQ80 = 1, kQ4K = 2, kF16 = 3, kBF16 = 4 };

template <int W>
struct Traits {
  static constexpr bool kQuant = W <= kQ4K;
  static constexpr bool kBf = W == kBF16;
  static constexpr int kBlocksPerGroup = W == kQ40 || W == kQ4K ? 4 : W == kQ80 ? 2 : 1;  // 32-column blocks
  static constexpr int kGroupCols = 32 * kBlocksPerGroup;
  static constexpr int kParts = kBf ? 3 : 2;  // 16-byte x fragments per (block, token, lane)
  static constexpr bool kScaled = !kBf;       // per-token power-of-two scaling of x
  static constexpr int kDepth = W == kQ80 || W >= kF16 ? 3 : 2;  // groups in registers per lane
};

constexpr int group_cols_of(int w) { return w == kQ80 ? 64 : (w >= kF16 ? 32 : 128); }

// ---- small device helpers ----------------------------------------------------------------

__device__ __forceinline__ uint32_t bf2_bits(__nv_bfloat162 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}


// c += A (16 x 16, row-major fragments a0..a3) * B (16 x 8, b0 b1), fp32 accumulate.
template <bool kBf>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  mma_16816<kBf>(c, a0, a1, a2, a3, b0, b1);
}

// c += A (16 x 8: a0 rows g, a1 rows g + 8) * B (8 x 8, b0), f16 in, fp32 accumulate.
__device__ __forceinline__ void mma_k8(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

// ---- the GEMV kernel -----------------------------------------------------------------------

struct GemvArgs {
  const uint8_t* w = nullptr;
  int64_t row_bytes = 0;     // bytes between weight rows
  int64_t rows = 0, cols = 0;
  int n_groups = 0;          // column groups per row
  int64_t scale_offset = 0;  // quant_layout.h offsets (quants)
  int64_t dm_offset = 0;
  const float* x = nullptr;
  int64_t x_stride = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
  int ntok = 1;
  int rw = 1;                 // row-warps per CTA (k-warps: kWarps / rw)
  int ck = 1;                 // CTAs per cluster (column slices)
  int slice_groups = 1;       // groups per slice
  bool x_vec = false;         // x rows 16-byte aligned (float4 loads)
};

// What one lane holds of one group: its 16 bytes of each of its 4 rows, and their scales.
struct GroupRegs {
  uint4 q[4];
  uint2 sc[4];     // Q4_0: 4 x fp16 d; Q8_0: .x = 2 x fp16 d; Q4_K: .x = sc[4], .y = m[4]
  uint32_t dm[4];  // Q4_K: (d, dmin) of the group's super-block
};

template <int W>
__device__ __forceinline__ void load_group(GroupRegs& G, const uint8_t* base, int64_t stride8, unsigned valid, int g,
                                           int t, const GemvArgs& a) {
  const int64_t qo = 64 * static_cast<int64_t>(g) + 16 * t;  // this lane's 16 bytes of group g
  const int64_t so = a.scale_offset + (W == kQ80 ? 4 : 8) * static_cast<int64_t>(g);
  const int64_t dmo = a.dm_offset + 4 * static_cast<int64_t>(g >> 1);
  bool in_row = true;
  if constexpr (W >= kF16) in_row = 32 * static_cast<int64_t>(g) + 8 * t < a.cols;  // f16 / bf16 rows end at cols
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    G.q[i] = make_uint4(0, 0, 0, 0);
    G.sc[i] = make_uint2(0, 0);
    G.dm[i] = 0;
    if (((valid >> i) & 1u) && in_row) {
      const uint8_t* rp = base + i * stride8;  // row g + 8 i of the warp
      G.q[i] = ld_w16(rp + qo);
      if constexpr (W == kQ40 || W == kQ4K) G.sc[i] = ld_w8(rp + so);
      if constexpr (W == kQ80) G.sc[i].x = ld_w4(rp + so);
      if constexpr (W == kQ4K) G.dm[i] = ld_w4(rp + dmo);
    }
  }
}

// Accumulates one group (slice-relative index gl) into acc[tile][c0..c3]. xs, sx: this lane's
// fragments of token gtok, lane t (see the kernel's shared-memory layout).
template <int W>
__device__ __forceinline__ void compute_group(const GroupRegs& G, int gl, int t, int ntok, const uint4* __restrict__ xs,
                                              const uint32_t* __restrict__ sx, float (&acc)[2][4]) {
  using Tr = Traits<W>;
  constexpr int P = Tr::kParts;
  if constexpr (W == kQ4K) {
    // Mins first (frees the m bytes): acc -= 32 dmin * sum_j m_j * (sum of x over sub-block j) / 32,
    // one m16n8k8: k 0..3 the hi terms of sub-blocks 0..3 (lanes t = 0, 1), k 4..7 the lo terms.
    const uint32_t fx = sx[gl * ntok * 4];
    const int tp = t & 1;  // this lane's sub-blocks: 2 tp, 2 tp + 1
    const uint32_t sel = 0x4040u | static_cast<uint32_t>(2 * tp) | static_cast<uint32_t>(2 * tp + 1) << 8;
    uint32_t mp[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      mp[i] = h2_bits(__hadd2(as_h2(__byte_perm(G.sc[i].y, 0x64646464u, sel)), as_h2(kH2Neg1024)));
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_k8(c, mp[2 * m], mp[2 * m + 1], fx);
      const float n0 = -32.0f * h_hi(G.dm[2 * m]), n1 = -32.0f * h_hi(G.dm[2 * m + 1]);
      acc[m][0] = fmaf(n0, c[0], acc[m][0]);
      acc[m][1] = fmaf(n0, c[1], acc[m][1]);
      acc[m][2] = fmaf(n1, c[2], acc[m][2]);
      acc[m][3] = fmaf(n1, c[3], acc[m][3]);
    }
  }
#pragma unroll
  for (int jj = 0; jj < Tr::kBlocksPerGroup; ++jj) {
    const int b = gl * Tr::kBlocksPerGroup + jj;  // slice-relative 32-column block
    const uint4* f = xs + b * P * ntok * 4;
    const uint4 f0 = f[0];
    const uint4 f1 = f[ntok * 4];
    uint4 f2 = make_uint4(0, 0, 0, 0);
    if constexpr (P == 3) f2 = f[2 * ntok * 4];

#pragma unroll
    for (int m = 0; m < 2; ++m) {
      uint32_t p[2][4];  // [row g, g + 8 of tile m][step s] A pairs
      float sc[2];       // their block scales
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 2 * m + h;
        const uint32_t* qw = reinterpret_cast<const uint32_t*>(&G.q[i]);
        if constexpr (W == kQ40 || W == kQ4K) {
          decode_q4<W == kQ40>(qw[jj], p[h]);
        } else if constexpr (W == kQ80) {
          decode_q8(qw[2 * jj], qw[2 * jj + 1], p[h]);
        } else {
#pragma unroll
          for (int s = 0; s < 4; ++s) p[h][s] = qw[s];
        }
        if constexpr (W == kQ40) {
          const uint32_t dw = jj < 2 ? G.sc[i].x : G.sc[i].y;
          sc[h] = (jj & 1) ? h_hi(dw) : h_lo(dw);
        } else if constexpr (W == kQ80) {
          sc[h] = (jj & 1) ? h_hi(G.sc[i].x) : h_lo(G.sc[i].x);
        } else if constexpr (W == kQ4K) {
          // d * sc exactly: (2^23 + sc) * d - 2^23 d in one rounding (the product has <= 17 bits).
          const float d = h_lo(G.dm[i]);
          const float f23 = __int_as_float(static_cast<int>(__byte_perm(G.sc[i].x, 0x4B000000u, 0x7440 + jj)));
          sc[h] = fmaf(f23, d, -8388608.0f * d);
        } else {
          sc[h] = 1.0f;
        }
      }
      const uint32_t(&pg)[4] = p[0];  // row g of the tile
      const uint32_t(&pq)[4] = p[1];  // row g + 8
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      // A = steps (s, s+1): k 0..7 <- step s's columns, k 8..15 <- step s+1's; one mma per term.
      if constexpr (P == 2) {
        mma<false>(c, pg[0], pq[0], pg[1], pq[1], f0.x, f0.y);  // hi
        mma<false>(c, pg[0], pq[0], pg[1], pq[1], f0.z, f0.w);  // lo
        mma<false>(c, pg[2], pq[2], pg[3], pq[3], f1.x, f1.y);
        mma<false>(c, pg[2], pq[2], pg[3], pq[3], f1.z, f1.w);
      } else {
        mma<true>(c, pg[0], pq[0], pg[1], pq[1], f0.x, f0.y);  // hi
        mma<true>(c, pg[0], pq[0], pg[1], pq[1], f0.z, f0.w);  // mid
        mma<true>(c, pg[0], pq[0], pg[1], pq[1], f1.x, f1.y);  // lo
        mma<true>(c, pg[2], pq[2], pg[3], pq[3], f1.z, f1.w);
        mma<true>(c, pg[2], pq[2], pg[3], pq[3], f2.x, f2.y);
        mma<true>(c, pg[2], pq[2], pg[3], pq[3], f2.z, f2.w);
      }
      if constexpr (Tr::kQuant) {
        acc[m][0] = fmaf(sc[0], c[0], acc[m][0]);
        acc[m][1] = fmaf(sc[0], c[1], acc[m][1]);
        acc[m][2] = fmaf(sc[1], c[2], acc[m][2]);
        acc[m][3] = fmaf(sc[1], c[3], acc[m][3]);
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[m][k] += c[k];
      }
    }
  }
}

// 4 consecutive x values of token row xr from column c (zeros past cols), times s.
__device__ __forceinline__ float4 load_x4(const float* __restrict__ xr, int64_t c, int64_t cols, bool vec, float s) {
  float4 v;
  if (vec && c + 4 <= cols) {
    v = __ldg(reinterpret_cast<const float4*>(xr + c));
  } else {
    v.x = c + 0 < cols ? __ldg(xr + c + 0) : 0.0f;
    v.y = c + 1 < cols ? __ldg(xr + c + 1) : 0.0f;
    v.z = c + 2 < cols ? __ldg(xr + c + 2) : 0.0f;
    v.w = c + 3 < cols ? __ldg(xr + c + 3) : 0.0f;
  }
  v.x *= s;
  v.y *= s;
  v.z *= s;
  v.w *= s;
  return v;
}

// (a, b) -> exact-sum f16 terms hi + lo.
__device__ __forceinline__ void split_f16(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 hf = __half22float2(h);
  hi = h2_bits(h);
  lo = h2_bits(__floats2half2_rn(a - hf.x, b - hf.y));
}
// (a, b) -> bf16 terms hi + mid + lo.
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t& hi, uint32_t& mid, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 hf = __bfloat1622float2(h);
  const float ra = a - hf.x, rb = b - hf.y;
  const __nv_bfloat162 m = __floats2bfloat162_rn(ra, rb);
  const float2 mf = __bfloat1622float2(m);
  hi = bf2_bits(h);
  mid = bf2_bits(m);
  lo = bf2_bits(__floats2bfloat162_rn(ra - mf.x, rb - mf.y));
}

// Shared memory (dynamic):
//   xs [slice blocks][P parts][ntok][4 lanes] x 16 bytes: the B fragments of each 32-column
//      block, f16 / bf16 pairs of x terms for the block's four k-steps s = 0..3 (8 columns each):
//      f16: part 0 = (hi0, hi1, lo0, lo1), part 1 = (hi2, hi3, lo2, lo3); bf16: part 0 =
//      (hi0, hi1, mid0, mid1), 1 = (lo0, lo1, hi2, hi3), 2 = (mid2, mid3, lo2, lo3).
//   sx [slice groups][ntok][4 lanes] x 4 bytes (Q4_K): the sums / 32 of x over the group's
//      sub-blocks as f16 pairs: lane 0 hi(0, 1), 1 hi(2, 3), 2 lo(0, 1), 3 lo(2, 3).
//   After the main loop the front is reused for the partials red [kWarps][32 rw][8] f32.
template <int W>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(GemvArgs a) {
  using Tr = Traits<W>;
  constexpr int P = Tr::kParts;
  constexpr int D = Tr::kDepth;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float s_scale[kMaxGemvRows], s_inv[kMaxGemvRows];  // per token: 2^e, 2^-e
  __shared__ int s_maxbits[kMaxGemvRows];                         // per token: max |x| bits

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kw_n = kWarps / a.rw;
  const int kw = warp % kw_n, rwi = warp / kw_n;
  const int ntok = a.ntok;
  const int gtok = g < ntok ? g : 0;  // lanes of absent tokens read token 0 (their columns are dropped)
  const int slice = blockIdx.x;
  const int g0 = slice * a.slice_groups;                            // first group of the slice
  const int sg = min(a.slice_groups, a.n_groups - g0);              // groups in this slice (>= 1)
  const int64_t c0 = g0 * Tr::kGroupCols;                            // first column of the slice
  const int64_t cta_row0 = static_cast<int64_t>(blockIdx.y) * kWarpRows * a.rw;
  const int64_t row0 = cta_row0 + rwi * kWarpRows;

  uint4* xs = reinterpret_cast<uint4*>(smem);
  const int slice_blocks = sg * Tr::kBlocksPerGroup;
  uint32_t* sx = reinterpret_cast<uint32_t*>(smem + slice_blocks * P * ntok * 64);

  // Rows of this lane and the first kDepth groups, in flight while x is staged.
  unsigned valid = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) valid |= (row0 + 8 * i + g < a.rows ? 1u : 0u) << i;
  const uint8_t* base = a.w + (row0 + g) * a.row_bytes;  // row g; rows g + 8 i at + i * stride8
  const int64_t stride8 = 8 * a.row_bytes;
  const int n_my = kw < sg ? static_cast<int>((sg - kw + kw_n - 1) / kw_n) : 0;  // groups kw, kw + kw_n, ...
  GroupRegs buf[D];
#pragma unroll
  for (int j = 0; j < D; ++j)
    if (j < n_my) load_group<W>(buf[j], base, stride8, valid, g0 + kw + j * kw_n, t, a);

  // ---- stage x -------------------------------------------------------------------------
  const int64_t c_end = min(a.cols, c0 + sg * Tr::kGroupCols);
  if constexpr (Tr::kScaled) {
    // max |x[tok]| over the slice (thread i: token i % ntok, one pass) -> scale 2^e with
    // max * 2^e in [2^14, 2^15). Non-negative floats order as their bits: a shared atomicMax.
    if (threadIdx.x < kMaxGemvRows) s_maxbits[threadIdx.x] = 0;
    __syncthreads();
    {
      const int tok = threadIdx.x % ntok, sub = threadIdx.x / ntok, n_sub = kThreads / ntok;
      const float* xr = a.x + tok * a.x_stride;
      float mx = 0.0f;
      if (sub < n_sub) {
        if (a.x_vec) {
          for (int64_t c = c0 + 4 * sub; c < c_end; c += 4 * n_sub) {
            const float4 v = load_x4(xr, c, c_end, true, 1.0f);
            mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
          }
        } else {
          for (int64_t c = c0 + sub; c < c_end; c += n_sub) mx = fmaxf(mx, fabsf(__ldg(xr + c)));
        }
      }
      atomicMax(&s_maxbits[tok], __float_as_int(mx));  // fmaxf drops NaN: mx is a number >= 0
    }
    __syncthreads();
    if (threadIdx.x < kMaxGemvRows) {
      const float m = __int_as_float(s_maxbits[threadIdx.x]);
      int e = 0;
      if (m > 0.0f && m <= 3.4028234e38f) {
        int ex;
        frexpf(m, &ex);  // m in [2^(ex-1), 2^ex)
        e = min(126, max(-126, 15 - ex));
      }
      s_scale[threadIdx.x] = __int_as_float((127 + e) << 23);
      s_inv[threadIdx.x] = __int_as_float((127 - e) << 23);
    }
  } else {
    if (threadIdx.x < kMaxGemvRows) {
      s_scale[threadIdx.x] = 1.0f;
      s_inv[threadIdx.x] = 1.0f;
    }
  }
  __syncthreads();
  {
    const int items = slice_blocks * ntok * 4;  // (block, token, lane)
    for (int it = threadIdx.x; it < items; it += kThreads) {
      const int tl = it & 3;
      const int rest = it >> 2;
      const int tok = rest % ntok;
      const int b = rest / ntok;
      const float* xr = a.x + tok * a.x_stride;
      const float s = s_scale[tok];
      const int64_t cb = c0 + 32 * b;  // the block's first column
      float4 v0, v1;
      float2 pr[4];  // the column pair of each k-step
      if constexpr (Tr::kQuant) {
        v0 = load_x4(xr, cb + 4 * tl, a.cols, a.x_vec, s);
        v1 = load_x4(xr, cb + 16 + 4 * tl, a.cols, a.x_vec, s);
        pr[0] = make_float2(v0.x, v0.z);
        pr[1] = make_float2(v0.y, v0.w);
        pr[2] = make_float2(v1.x, v1.z);
        pr[3] = make_float2(v1.y, v1.w);
      } else {
        v0 = load_x4(xr, cb + 8 * tl, a.cols, a.x_vec, s);
        v1 = load_x4(xr, cb + 8 * tl + 4, a.cols, a.x_vec, s);
        pr[0] = make_float2(v0.x, v0.y);
        pr[1] = make_float2(v0.z, v0.w);
        pr[2] = make_float2(v1.x, v1.y);
        pr[3] = make_float2(v1.z, v1.w);
      }
      uint4* dst = xs + (b * P * ntok + tok) * 4 + tl;
      if constexpr (P == 2) {
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) split_f16(pr[k].x, pr[k].y, hi[k], lo[k]);
        dst[0] = make_uint4(hi[0], hi[1], lo[0], lo[1]);
        dst[ntok * 4] = make_uint4(hi[2], hi[3], lo[2], lo[3]);
      } else {
        uint32_t hi[4], mid[4], lo[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) split_bf16(pr[k].x, pr[k].y, hi[k], mid[k], lo[k]);
        dst[0] = make_uint4(hi[0], hi[1], mid[0], mid[1]);
        dst[ntok * 4] = make_uint4(lo[0], lo[1], hi[2], hi[3]);
        dst[ntok * 8] = make_uint4(mid[2], mid[3], lo[2], lo[3]);
      }
    }
    if constexpr (W == kQ4K) {
      const int sitems = sg * ntok * 2;  // (group, token, sub-block pair tp)
      for (int it = threadIdx.x; it < sitems; it += kThreads) {
        const int tp = it & 1;
        const int rest = it >> 1;
        const int tok = rest % ntok;
        const int gl = rest / ntok;
        {
          const float* xr = a.x + tok * a.x_stride;
          const float s = s_scale[tok];
          float sum[2];
#pragma unroll
          for (int p = 0; p < 2; ++p) {  // sub-block 2 tp + p of the group
            const int64_t cb = c0 + 128 * gl + 32 * (2 * tp + p);
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
              const float4 v = load_x4(xr, cb + 4 * k, a.cols, a.x_vec, s);
              acc += v.x;
              acc += v.y;
              acc += v.z;
              acc += v.w;
            }
            sum[p] = acc * 0.03125f;
          }
          uint32_t hi, lo;
          split_f16(sum[0], sum[1], hi, lo);
          sx[(gl * ntok + tok) * 4 + tp] = hi;
          sx[(gl * ntok + tok) * 4 + 2 + tp] = lo;
        }
      }
    }
  }
  __syncthreads();

  // ---- main loop: kDepth groups in registers, refilled after use -------------------------
  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  const uint4* xs_lane = xs + gtok * 4 + t;
  const uint32_t* sx_lane = sx + gtok * 4 + t;
  for (int i = 0; i < n_my; i += D) {
#pragma unroll
    for (int j = 0; j < D; ++j) {
      if (i + j < n_my) {
        compute_group<W>(buf[j], kw + (i + j) * kw_n, t, ntok, xs_lane, sx_lane, acc);
        if (i + j + D < n_my) load_group<W>(buf[j], base, stride8, valid, g0 + kw + (i + j + D) * kw_n, t, a);
      }
    }
  }

  // ---- epilogue: warps -> CTA (fixed order), CTAs of the cluster -> y ---------------------
  const int R = kWarpRows * a.rw;  // rows of the CTA
  __syncthreads();                  // every warp is done with xs / sx
  float* red = reinterpret_cast<float*>(smem);  // [kw_n][R][8]
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = rwi * kWarpRows + 16 * m + 8 * h + g;
      float* dst = red + (static_cast<int64_t>(kw) * R + r) * 8 + 2 * t;
      dst[0] = acc[m][2 * h];
      dst[1] = acc[m][2 * h + 1];
    }
  __syncthreads();
  for (int it = threadIdx.x; it < R * ntok; it += kThreads) {
    const int tok = it / R, r = it % R;
    float v = 0.0f;
    for (int k = 0; k < kw_n; ++k) v += red[(static_cast<int64_t>(k) * R + r) * 8 + tok];
    v *= s_inv[tok];
    if (a.ck == 1) {
      const int64_t row = cta_row0 + r;
      if (row < a.rows) a.y[tok * a.y_stride + row] = v;
    } else {
      red[r * 8 + tok] = v;  // only this thread reads or writes this slot of slice 0
    }
  }
  if (a.ck > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int part = (R + a.ck - 1) / a.ck;
    const int r_begin = slice * part, r_end = min(R, r_begin + part);
    const int n = max(0, r_end - r_begin);
    for (int it = threadIdx.x; it < n * ntok; it += kThreads) {
      const int tok = it / n, r = r_begin + it % n;
      float v = 0.0f;
      for (int q = 0; q < a.ck; ++q) v += cluster.map_shared_rank(red, q)[r * 8 + tok];
      const int64_t row = cta_row0 + r;
      if (row < a.rows) a.y[tok * a.y_stride + row] = v;
    }
    cluster.sync();  // no CTA leaves while its partials may still be read
  }
}

// ---- dequantization and embedding ---------------------------------------------------------

// Block b (32 columns) of a device row -> y[32], hs::dequantize_row's arithmetic.
template <int W>
__device__ __forceinline__ void dequant_block(const uint8_t* __restrict__ row, int64_t scale_offset,
                                              int64_t dm_offset, int64_t b, float (&y)[32]) {
  if constexpr (W == kQ80) {
    const float d = __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(row + scale_offset + 2 * b)));
    const uint8_t* q = row + 64 * (b >> 1) + 8 * (b & 1);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const uint2 v = *reinterpret_cast<const uint2*>(q + 16 * t);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        y[4 * t + i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(v.x >> (8 * i))), d);
        y[16 + 4 * t + i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(v.y >> (8 * i))), d);
      }
    }
  } else {
    const uint8_t* q = row + 64 * (b >> 2) + 4 * (b & 3);
    uint32_t wd[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) wd[t] = *reinterpret_cast<const uint32_t*>(q + 16 * t);
    if constexpr (W == kQ40) {
      const float d =
          __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(row + scale_offset + 2 * b)));
#pragma unroll
      for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          y[4 * t + i] = __fmul_rn(static_cast<float>(static_cast<int>((wd[t] >> (8 * i)) & 15u) - 8), d);
          y[16 + 4 * t + i] = __fmul_rn(static_cast<float>(static_cast<int>((wd[t] >> (8 * i + 4)) & 15u) - 8), d);
        }
    } else {
      const int64_t gq = b >> 2;
      const int j = static_cast<int>(b & 3);
      const uint32_t dm = *reinterpret_cast<const uint32_t*>(row + dm_offset + 4 * (b >> 3));
      const float d = h_lo(dm), dmin = h_hi(dm);
      const float d0 = __fmul_rn(d, static_cast<float>(row[scale_offset + 8 * gq + j]));
      const float m0 = __fmul_rn(dmin, static_cast<float>(row[scale_offset + 8 * gq + 4 + j]));
#pragma unroll
      for (int t = 0; t < 4; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          y[4 * t + i] = __fsub_rn(__fmul_rn(d0, static_cast<float>((wd[t] >> (8 * i)) & 15u)), m0);
          y[16 + 4 * t + i] = __fsub_rn(__fmul_rn(d0, static_cast<float>((wd[t] >> (8 * i + 4)) & 15u)), m0);
        }
    }
  }
}

__device__ __forceinline__ uint32_t pack_f16_clamped(float a, float b) {
  // Comparisons are false for NaN, so NaN passes through.
  a = a > 65504.0f ? 65504.0f : (a < -65504.0f ? -65504.0f : a);
  b = b > 65504.0f ? 65504.0f : (b < -65504.0f ? -65504.0f : b);
  return h2_bits(__floats2half2_rn(a, b));
}

struct DequantArgs {
  const uint8_t* w = nullptr;
  int64_t row_bytes = 0, rows = 0, cols = 0, scale_offset = 0, dm_offset = 0;
};

// out [rows][cols] f16: thread per (row, block), grid-strided.
template <int W>
__global__ void __launch_bounds__(128) dequant_kernel(DequantArgs a, uint16_t* __restrict__ out) {
  const int64_t nb = a.cols / 32;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const uint8_t* row = a.w + r * a.row_bytes;
    for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < nb;
         b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float y[32];
      dequant_block<W>(row, a.scale_offset, a.dm_offset, b, y);
      uint4* dst = reinterpret_cast<uint4*>(out + r * a.cols + 32 * b);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        dst[k] = make_uint4(pack_f16_clamped(y[8 * k + 0], y[8 * k + 1]), pack_f16_clamped(y[8 * k + 2], y[8 * k + 3]),
                            pack_f16_clamped(y[8 * k + 4], y[8 * k + 5]), pack_f16_clamped(y[8 * k + 6], y[8 * k + 7]));
    }
  }
}

// out[i][:] = row tokens[i] as f32: thread per (token, block).
template <int W>
__global__ void __launch_bounds__(128) embedding_kernel(DequantArgs a, const int32_t* __restrict__ tokens, Rows out,
                                                        bool vec) {
  const int64_t nb = a.cols / 32;
  for (int64_t i = blockIdx.y; i < out.rows; i += gridDim.y) {
    const uint8_t* row = a.w + static_cast<int64_t>(tokens[i]) * a.row_bytes;
    float* orow = out.p + i * out.stride;
    for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < nb;
         b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float y[32];
      dequant_block<W>(row, a.scale_offset, a.dm_offset, b, y);
      if (vec) {
        float4* dst = reinterpret_cast<float4*>(orow + 32 * b);
#pragma unroll
        for (int k = 0; k < 8; ++k) dst[k] = make_float4(y[4 * k], y[4 * k + 1], y[4 * k + 2], y[4 * k + 3]);
      } else {
#pragma unroll
        for (int k = 0; k < 32; ++k) orow[32 * b + k] = y[k];
      }
    }
  }
}

// ---- host side -------------------------------------------------------------------------------


double bytes_per_weight(int w) {
  switch (w) {
    case kQ40: return 18.0 / 32;
    case kQ80: return 34.0 / 32;
    case kQ4K: return 148.0 / 256;
    default: return 2.0;
  }
}

template <int W>
cudaError_t run_gemv(const GemvArgs& base, const GemvPlan& plan, cudaStream_t s) {
  static std::atomic<size_t> smem_set[kSmemLimitDevices];
  GemvArgs a = base;
  a.rw = plan.rw;
  a.ck = plan.ck;
  a.slice_groups = static_cast<int>(plan.slice_groups);
  const int64_t rows_per_cta = int64_t{kWarpRows} * plan.rw;
  const int64_t row_blocks = (a.rows + rows_per_cta - 1) / rows_per_cta;
  if (row_blocks > 65535) return cudaErrorInvalidValue;
  auto kernel = gemv_kernel<W>;
  cudaError_t e = ensure_smem_limit(kernel, plan.smem_bytes, kMaxSmem, smem_set);
  if (e == cudaErrorNotSupported) return cudaErrorInvalidValue;  // over the device's limit: not taken
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(plan.ck), static_cast<unsigned>(row_blocks), 1);
  cfg.blockDim = dim3(kThreads, 1, 1);
  cfg.dynamicSmemBytes = plan.smem_bytes;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(plan.ck);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = plan.ck > 1 ? 1 : 0;
  e = cudaLaunchKernelEx(&cfg, kernel, a);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

bool plan_valid(int w, const GemvPlan& p, int64_t n_groups, int ntok) {
  if (p.rw != 1 && p.rw != 2 && p.rw != 4 && p.rw != 8) return false;
  if (p.ck < 1 || p.ck > 8 || p.slice_groups < 1) return false;
  if ((p.ck - 1) * p.slice_groups >= n_groups || p.ck * p.slice_groups < n_groups) return false;  // every slice non-empty
  return p.smem_bytes >= gemv_smem_bytes(static_cast<GemvWeights>(w), p.slice_groups, ntok) && p.smem_bytes <= kMaxSmem;
}

bool rows_ok(CRows x, Rows y, int64_t rows, int64_t cols) {
  return cols <= (int64_t{1} << 24) && x.p && y.p && x.rows >= 1 && x.rows <= kMaxGemvRows && x.cols == cols && x.stride >= cols &&
         y.rows == x.rows && y.cols == rows && y.stride >= rows;
}

GemvArgs gemv_args(CRows x, Rows y, int64_t rows, int64_t cols) {
  GemvArgs a;
  a.rows = rows;
  a.cols = cols;
  a.x = x.p;
  a.x_stride = x.stride;
  a.y = y.p;
  a.y_stride = y.stride;
  a.ntok = static_cast<int>(x.rows);
  a.x_vec = reinterpret_cast<uintptr_t>(x.p) % 16 == 0 && x.stride % 4 == 0;
  return a;
}

}  // namespace

int64_t gemv_group_cols(GemvWeights w) { return group_cols_of(static_cast<int>(w)); }

size_t gemv_smem_bytes(GemvWeights wk, int64_t slice_groups, int n_tok) {
  const int w = static_cast<int>(wk);
  const size_t per_group = static_cast<size_t>(group_cols_of(w) / 32) * (w == kBF16 ? 3 : 2) * n_tok * 64 +
                           (w == kQ4K ? static_cast<size_t>(n_tok) * 16 : 0);
  return std::max(static_cast<size_t>(slice_groups) * per_group, kRedBytes);
}

GemvPlan plan_gemv(GemvWeights wk, int64_t rows, int64_t cols, int n_tok, int n_sm) {
  GemvPlan best;
  const int w = static_cast<int>(wk);
  if (n_tok < 1 || n_tok > kMaxGemvRows || rows < 1 || cols < 1 || w < 0 || w > kBF16) return best;
  n_sm = std::max(1, n_sm);
  const int64_t gcols = group_cols_of(w);
  const int64_t n_groups = (cols + gcols - 1) / gcols;
  const double bpw = bytes_per_weight(w);
  const double total_w = static_cast<double>(rows) * static_cast<double>(cols) * bpw;
  double best_cost = 0;
  // Cost model (bytes per SM, the busiest SM): CTAs per SM x (the CTA's weight bytes, a quarter of
  // its x bytes from L2 (read twice), and ~4 KB of fixed prologue / epilogue); slices of one row
  // block may differ by a few groups, so a CTA's weights are the mean of its max and the average.
  for (int rw : {1, 2, 4, 8}) {
    const int kw = kWarps / rw;
    const int64_t R = int64_t{kWarpRows} * rw;
    const int64_t row_blocks = (rows + R - 1) / R;
    if (row_blocks > 65535) continue;
    for (int ck = 1; ck <= 8; ++ck) {
      const int64_t sgroups = (n_groups + ck - 1) / ck;
      if ((n_groups + sgroups - 1) / sgroups != ck) continue;  // the same split as a smaller ck
      const size_t smem = gemv_smem_bytes(wk, sgroups, n_tok);
      if (smem > kMaxSmem) continue;
      const int64_t n_cta = row_blocks * ck;
      const double per_sm = static_cast<double>((n_cta + n_sm - 1) / n_sm);
      const double w_max = static_cast<double>(R) * static_cast<double>(sgroups * gcols) * bpw;
      const double w_cta = 0.5 * (w_max + total_w / static_cast<double>(n_cta));
      const double x_cta = 2.0 * 4.0 * n_tok * static_cast<double>(sgroups * gcols);
      const double active = static_cast<double>(rw) * static_cast<double>(std::min<int64_t>(kw, sgroups));
      double cost = per_sm * (w_cta + 0.25 * x_cta + 4096.0 + (ck > 1 ? 1024.0 : 0.0));
      cost *= 1.0 + 0.5 * (1.0 - active / kWarps);  // idle warps: fewer loads in flight
      if (best.slice_groups == 0 || cost < best_cost * 0.999) {
        best_cost = cost;
        best.rw = rw;
        best.ck = ck;
        best.slice_groups = sgroups;
        best.smem_bytes = smem;
      }
    }
  }
  return best;
}

cudaError_t launch_gemv_quant(QuantKind k, const uint8_t* w, int64_t rows, int64_t cols, int64_t w_row_bytes,
                              CRows x, Rows y, cudaStream_t s, const GemvPlan* plan) {
  if (rows <= 0 || x.rows <= 0) return cudaSuccess;
  if (!quant_cols_valid(k, cols) || !w || !rows_ok(x, y, rows, cols) || reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  const QuantRowLayout l = quant_row_layout(k, cols);
  if (w_row_bytes < l.row_bytes || w_row_bytes % 16 != 0) return cudaErrorInvalidValue;
  const int wk = static_cast<int>(k);
  GemvArgs a = gemv_args(x, y, rows, cols);
  a.w = w;
  a.row_bytes = w_row_bytes;
  a.n_groups = static_cast<int>(l.groups);
  a.scale_offset = l.scale_offset;
  a.dm_offset = l.dm_offset;
  const GemvPlan p = plan ? *plan : plan_gemv(static_cast<GemvWeights>(wk), rows, cols, a.ntok, current_device_sm_count());
  if (!plan_valid(wk, p, l.groups, a.ntok)) return cudaErrorInvalidValue;
  switch (k) {
    case QuantKind::kQ4_0: return run_gemv<kQ40>(a, p, s);
    case QuantKind::kQ8_0: return run_gemv<kQ80>(a, p, s);
    case QuantKind::kQ4_K: return run_gemv<kQ4K>(a, p, s);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_gemv16(bool bf16, const uint16_t* w, int64_t rows, int64_t cols, int64_t w_stride_elems, CRows x,
                          Rows y, cudaStream_t s, const GemvPlan* plan) {
  if (rows <= 0 || x.rows <= 0) return cudaSuccess;
  if (cols <= 0 || cols % 8 != 0 || !w || !rows_ok(x, y, rows, cols) || w_stride_elems < cols ||
      w_stride_elems % 8 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  const int wk = bf16 ? kBF16 : kF16;
  GemvArgs a = gemv_args(x, y, rows, cols);
  a.w = reinterpret_cast<const uint8_t*>(w);
  a.row_bytes = w_stride_elems * 2;
  a.n_groups = static_cast<int>((cols + 31) / 32);
  const GemvPlan p = plan ? *plan : plan_gemv(static_cast<GemvWeights>(wk), rows, cols, a.ntok, current_device_sm_count());
  if (!plan_valid(wk, p, a.n_groups, a.ntok)) return cudaErrorInvalidValue;
  return bf16 ? run_gemv<kBF16>(a, p, s) : run_gemv<kF16>(a, p, s);
}

cudaError_t launch_dequantize_quant(QuantKind k, const uint8_t* w, int64_t rows, int64_t cols, int64_t w_row_bytes,
                                    uint16_t* out_f16, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  const QuantRowLayout l = quant_row_layout(k, cols);
  if (!quant_cols_valid(k, cols) || !w || !out_f16 || w_row_bytes < l.row_bytes || w_row_bytes % 16 != 0 ||
      reinterpret_cast<uintptr_t>(out_f16) % 16 != 0)
    return cudaErrorInvalidValue;
  DequantArgs a{w, w_row_bytes, rows, cols, l.scale_offset, l.dm_offset};
  const int64_t nb = cols / 32;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((nb + 127) / 128, 1024)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)), 1);
  switch (k) {
    case QuantKind::kQ4_0: dequant_kernel<kQ40><<<grid, 128, 0, s>>>(a, out_f16); break;
    case QuantKind::kQ8_0: dequant_kernel<kQ80><<<grid, 128, 0, s>>>(a, out_f16); break;
    case QuantKind::kQ4_K: dequant_kernel<kQ4K><<<grid, 128, 0, s>>>(a, out_f16); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_embedding_quant(QuantKind k, const uint8_t* w, int64_t cols, int64_t w_row_bytes,
                                   const int32_t* tokens, Rows out, cudaStream_t s) {
  if (out.rows <= 0) return cudaSuccess;
  const QuantRowLayout l = quant_row_layout(k, cols);
  if (!quant_cols_valid(k, cols) || !w || !tokens || !out.p || out.cols != cols || out.stride < cols ||
      w_row_bytes < l.row_bytes || w_row_bytes % 16 != 0)
    return cudaErrorInvalidValue;
  DequantArgs a{w, w_row_bytes, 0, cols, l.scale_offset, l.dm_offset};
  const bool vec = reinterpret_cast<uintptr_t>(out.p) % 16 == 0 && out.stride % 4 == 0;
  const int64_t nb = cols / 32;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((nb + 127) / 128, 1024)),
                  static_cast<unsigned>(std::min<int64_t>(out.rows, 65535)), 1);
  switch (k) {
    case QuantKind::kQ4_0: embedding_kernel<kQ40><<<grid, 128, 0, s>>>(a, tokens, out, vec); break;
    case QuantKind::kQ8_0: embedding_kernel<kQ80><<<grid, 128, 0, s>>>(a, tokens, out, vec); break;
    case QuantKind::kQ4_K: embedding_kernel<kQ4K><<<grid, 128, 0, s>>>(a, tokens, out, vec); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace hs::cuda
