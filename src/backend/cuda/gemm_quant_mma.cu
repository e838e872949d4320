// backend/cuda/gemm_quant_mma.cu — see gemm_quant_mma.h.
//
// Fragments (mma.m16n8k16, A row-major = weights, B col-major = x; mma.cuh): lane (g, t) =
// (lane / 4, lane % 4). A warp's 32 rows are two m16 tiles; the lane's 16-byte load of a group
// from row g + 8 i (i = 0..3) decodes (quant_decode.cuh) into the pairs p[s] of its 32-column
// blocks: p[0] = columns (4t, 4t+2), p[1] = (4t+1, 4t+3), p[2] = (16+4t, 16+4t+2), p[3] =
// (16+4t+1, 16+4t+3). A dot product does not care which column sits in which k slot as long as
// A and B agree, so a block is two k16 mmas: (p[0], p[1]) with B pairs b0 = x(4t, 4t+2), b1 =
// x(4t+1, 4t+3), then (p[2], p[3]) with the same 16 columns on. B comes from the staged x row of
// token 8 nt + g: two 8-byte shared loads (columns 4t..4t+3 and 16+4t..16+4t+3) and a byte
// permute each (no ldmatrix: its row order is the plain one).
// Shared memory: xs [kStages][8 NT tokens][kXRow halfs] (128 staged columns + 16 of padding, so
// the 8-byte loads of a half-warp — 4 tokens x 4 lanes — hit 32 distinct banks); the epilogue of
// a cluster reuses it for red [128 rows][8 NT] f32.
// Per warp and 128 columns: 16 weight words decoded (5 instructions each) and scaled (2 HMUL2 /
// HFMA2), 8 NT shared loads + 16 NT permutes, 16 NT mmas.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "backend/cuda/gemm_quant_mma.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_decode.cuh"
#include "backend/cuda/weight_loads.cuh"

namespace hs::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarpRows = 32;
constexpr int kCtaRows = kThreads / 32 * kWarpRows;  // 128
constexpr int kChunkCols = 128;                     // x columns staged per step
constexpr int kXRow = kChunkCols + 16;              // halfs per staged token row
constexpr int kMaxTiles = 4;                        // n8 tiles per CTA
constexpr int kStages = 4;                          // x chunks in shared memory (3 staged ahead)
constexpr int kMaxCluster = 8;
constexpr int kMaxDevices = 64;

constexpr int kW = kMaxGemmQuantWeights;

struct Args {
  // Weight i (i < n_weights): its rows, device rows row_bytes apart, and its output y[i]
  // [n_tok][y_stride]; it owns the row blocks [block_begin[i], block_begin[i + 1]) along y.
  const uint8_t* w[kW] = {};
  int64_t row_bytes[kW] = {}, rows[kW] = {};
  float* y[kW] = {};
  int64_t y_stride[kW] = {};
  int block_begin[kW + 1] = {};
  int n_weights = 0;
  int64_t cols = 0;
  int64_t scale_offset = 0, dm_offset = 0;  // the same layout for every weight (same kind and cols)
  const uint16_t* x = nullptr;  // [n_tok][x_stride] f16
  int64_t x_stride = 0;
  int n_tok = 0;
  int64_t n_groups = 0;  // quant groups of a row (a Q8_0 row's last chunk may hold one)
  int n_chunks = 0;      // 128-column chunks of a row
  int slice_chunks = 0;  // chunks per CTA of a cluster
  int ck = 1;
};

// a[i] for a kernel-parameter array without a local-memory copy.
template <typename T>
__device__ __forceinline__ T pick(const T (&a)[kW], int i) {
  static_assert(kW == 4, "pick() selects among 4");
  return i == 0 ? a[0] : i == 1 ? a[1] : i == 2 ? a[2] : a[3];
}

// The weight of the CTA whose row block (along the launch's list) is `block`: its rows, row
// stride, output, and the first row of the block within it (blocks of `block_rows` rows).
struct CtaWeight {
  const uint8_t* w;
  int64_t rows, row_bytes;
  float* y;
  int64_t y_stride;
  int64_t row0;
};
__device__ __forceinline__ CtaWeight cta_weight(const Args& a, int block, int64_t block_rows) {
  int wi = 0;
#pragma unroll
  for (int i = 1; i < kW; ++i)
    if (i < a.n_weights && block >= a.block_begin[i]) wi = i;
  const int first = wi == 0 ? a.block_begin[0] : wi == 1 ? a.block_begin[1] : wi == 2 ? a.block_begin[2] : a.block_begin[3];
  return CtaWeight{pick(a.w, wi), pick(a.rows, wi), pick(a.row_bytes, wi), pick(a.y, wi), pick(a.y_stride, wi),
                   static_cast<int64_t>(block - first) * block_rows};
}

// One chunk of one lane's 4 rows: its 16 bytes of each of the chunk's groups (1 Q4 group of 128
// columns, 2 Q8 groups of 64) and their scales.
template <int K>
struct ChunkRegs {
  static constexpr int kGroups = K == static_cast<int>(QuantKind::kQ8_0) ? 2 : 1;
  uint4 q[kGroups][4];
  uint2 sc[kGroups][4];  // Q4_0: 4 x fp16 d; Q8_0: .x = 2 x fp16 d; Q4_K: .x = sc[4], .y = m[4]
  uint32_t dm[4];        // Q4_K: (d, dmin) of the group's super-block
};

// Chunks of weights a lane keeps in flight: 3 for Q4_0 (one group a chunk), 2 for Q4_K (more
// registers a group) and Q8_0 (two groups a chunk): no spills at 3 CTAs an SM.
template <int K>
constexpr int kWeightDepth = K == static_cast<int>(QuantKind::kQ4_0) ? 3 : 2;

template <int K>
__device__ __forceinline__ void load_chunk(ChunkRegs<K>& R, const uint8_t* base, int64_t stride8, unsigned valid,
                                           int chunk, int t, const Args& a) {
  constexpr int G = ChunkRegs<K>::kGroups;
#pragma unroll
  for (int gg = 0; gg < G; ++gg) {
    const int64_t grp = static_cast<int64_t>(chunk) * G + gg;
    const int64_t qo = 64 * grp + 16 * t;
    const int64_t so = a.scale_offset + (K == static_cast<int>(QuantKind::kQ8_0) ? 4 : 8) * grp;
    const bool in_row = grp < a.n_groups;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      R.q[gg][i] = make_uint4(0, 0, 0, 0);
      R.sc[gg][i] = make_uint2(0, 0);
      if (((valid >> i) & 1u) && in_row) {
        const uint8_t* rp = base + i * stride8;
        R.q[gg][i] = ld_w16(rp + qo);
        if constexpr (K == static_cast<int>(QuantKind::kQ8_0)) {
          R.sc[gg][i].x = ld_w4(rp + so);
        } else {
          R.sc[gg][i] = ld_w8(rp + so);
        }
      }
    }
  }
  if constexpr (K == static_cast<int>(QuantKind::kQ4_K)) {
    const int64_t dmo = a.dm_offset + 4 * (static_cast<int64_t>(chunk) >> 1);  // 2 groups a super-block
#pragma unroll
    for (int i = 0; i < 4; ++i) R.dm[i] = ((valid >> i) & 1u) ? ld_w4(base + i * stride8 + dmo) : 0u;
  }
}

__device__ __forceinline__ uint32_t lds32x2_lo(const uint2& u) { return __byte_perm(u.x, u.y, 0x5410); }
__device__ __forceinline__ uint32_t lds32x2_hi(const uint2& u) { return __byte_perm(u.x, u.y, 0x7632); }

// (v, v) as f16 bits from one fp16 half of a word (hi: the upper half).
__device__ __forceinline__ uint32_t dup_half(uint32_t w, bool hi) { return __byte_perm(w, 0, hi ? 0x3232 : 0x1010); }

// acc[m][nt] += the chunk's products. bfrags(blk, b) fills b[nt][0..3] with the B fragments of
// the chunk's 32-column block blk (k16 steps (4t, 4t+2 | 4t+1, 4t+3) and the same 16 columns on).
template <int K, int NT, typename BFrags>
__device__ __forceinline__ void compute_chunk(const ChunkRegs<K>& R, const BFrags& bfrags, float (&acc)[2][NT][4]) {
  constexpr int G = ChunkRegs<K>::kGroups;
  constexpr int kBlocks = K == static_cast<int>(QuantKind::kQ8_0) ? 2 : 4;  // 32-column blocks a group
#pragma unroll
  for (int gg = 0; gg < G; ++gg) {
#pragma unroll
    for (int jj = 0; jj < kBlocks; ++jj) {
      uint32_t b[NT][4];
      bfrags(gg * kBlocks + jj, b);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        uint32_t p[2][4];  // rows g and g + 8 of tile m
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = 2 * m + h;
          const uint32_t* qw = reinterpret_cast<const uint32_t*>(&R.q[gg][i]);
          if constexpr (K == static_cast<int>(QuantKind::kQ4_0)) {
            decode_q4<true>(qw[jj], p[h]);
            const __half2 d2 = as_h2(dup_half(jj < 2 ? R.sc[gg][i].x : R.sc[gg][i].y, jj & 1));
#pragma unroll
            for (int s = 0; s < 4; ++s) p[h][s] = h2_bits(__hmul2(as_h2(p[h][s]), d2));
          } else if constexpr (K == static_cast<int>(QuantKind::kQ8_0)) {
            decode_q8(qw[2 * jj], qw[2 * jj + 1], p[h]);
            const __half2 d2 = as_h2(dup_half(R.sc[gg][i].x, jj & 1));
#pragma unroll
            for (int s = 0; s < 4; ++s) p[h][s] = h2_bits(__hmul2(as_h2(p[h][s]), d2));
          } else {
            decode_q4<false>(qw[jj], p[h]);
            const float d = h_lo(R.dm[i]), dmin = h_hi(R.dm[i]);
            const float sc = static_cast<float>((R.sc[gg][i].x >> (8 * jj)) & 0xffu);
            const float mn = static_cast<float>((R.sc[gg][i].y >> (8 * jj)) & 0xffu);
            const __half2 ds = __float2half2_rn(__fmul_rn(d, sc));
            const __half2 nm = __float2half2_rn(-__fmul_rn(dmin, mn));
#pragma unroll
            for (int s = 0; s < 4; ++s) p[h][s] = h2_bits(__hfma2(as_h2(p[h][s]), ds, nm));
          }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          mma_16816<false>(acc[m][nt], p[0][0], p[1][0], p[0][1], p[1][1], b[nt][0], b[nt][1]);
          mma_16816<false>(acc[m][nt], p[0][2], p[1][2], p[0][3], p[1][3], b[nt][2], b[nt][3]);
        }
      }
    }
  }
}

// B fragments from an 8-byte load of columns 4t..4t+3 (u) and one of 16+4t..16+4t+3 (v).
__device__ __forceinline__ void bfrag_of(const uint2& u, const uint2& v, uint32_t (&b)[4]) {
  b[0] = lds32x2_lo(u);
  b[1] = lds32x2_hi(u);
  b[2] = lds32x2_lo(v);
  b[3] = lds32x2_hi(v);
}

// compute_chunk over the staged chunk xs (token rows kXRow halfs apart).
template <int K, int NT>
__device__ __forceinline__ void compute_chunk_smem(const ChunkRegs<K>& R, const __half* __restrict__ xs, int g, int t,
                                                   float (&acc)[2][NT][4]) {
  compute_chunk<K, NT>(
      R,
      [&](int blk, uint32_t (&b)[NT][4]) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const __half* xr = xs + (nt * 8 + g) * kXRow + blk * 32 + 4 * t;
          bfrag_of(*reinterpret_cast<const uint2*>(xr), *reinterpret_cast<const uint2*>(xr + 16), b[nt]);
        }
      },
      acc);
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: zero-fill
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Stages columns [c0, c0 + 128) of tokens [tok0, tok0 + 8 NT) into xs (zeros past cols / n_tok).
template <int NT>
__device__ __forceinline__ void stage_x(__half* xs, const Args& a, int tok0, int64_t c0) {
  constexpr int kItems = NT * 8 * (kChunkCols / 8);  // 16-byte pieces
#pragma unroll
  for (int it = threadIdx.x; it < kItems; it += kThreads) {
    const int tk = it / (kChunkCols / 8), u = it % (kChunkCols / 8);
    const int tok = tok0 + tk;
    const int64_t c = c0 + 8 * u;
    const bool valid = tok < a.n_tok && c < a.cols;  // a.cols: every weight's
    const uint16_t* src = valid ? a.x + tok * a.x_stride + c : a.x;
    cp_async16(xs + tk * kXRow + 8 * u, src, valid);
  }
}

template <int K, int NT>
__global__ void __launch_bounds__(kThreads, 3) gemm_quant_kernel(Args a) {
  constexpr int D = kWeightDepth<K>;
  constexpr int kStage = NT * 8 * kXRow;  // halfs of one staged chunk
  extern __shared__ __align__(16) uint8_t smem[];
  __half* xs = reinterpret_cast<__half*>(smem);  // [kStages][8 NT][kXRow]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int slice = blockIdx.x;
  const CtaWeight cw = cta_weight(a, static_cast<int>(blockIdx.y), kCtaRows);
  const int64_t rows = cw.rows, row_bytes = cw.row_bytes, y_stride = cw.y_stride, cta_row0 = cw.row0;
  float* const y = cw.y;
  const int64_t row0 = cta_row0 + warp * kWarpRows;
  const int tok0 = static_cast<int>(blockIdx.z) * NT * 8;
  const int ch0 = slice * a.slice_chunks;
  const int nc = min(a.slice_chunks, a.n_chunks - ch0);  // >= 1 (the planner leaves no slice empty)

  unsigned valid = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) valid |= (row0 + 8 * i + g < rows ? 1u : 0u) << i;
  const uint8_t* base = cw.w + (row0 + g) * row_bytes;
  const int64_t stride8 = 8 * row_bytes;

  // The first D chunks' weights in flight before waiting for the kernel that wrote x.
  ChunkRegs<K> wr[D];
#pragma unroll
  for (int j = 0; j < D; ++j)
    if (j < nc) load_chunk<K>(wr[j], base, stride8, valid, ch0 + j, t, a);
  pdl_launch_dependents();
  pdl_wait();

  float acc[2][NT][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[m][nt][k] = 0.0f;

  // x: kStages - 1 chunks staged ahead (one cp.async group each, empty past the slice).
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < nc) stage_x<NT>(xs + st * kStage, a, tok0, static_cast<int64_t>(ch0 + st) * kChunkCols);
    cp_async_commit();
  }
  for (int c = 0; c < nc; c += D) {
#pragma unroll
    for (int j = 0; j < D; ++j) {
      const int cc = c + j;
      if (cc < nc) {
        cp_async_wait<kStages - 2>();  // this thread's pieces of chunk cc have landed
        __syncthreads();               // everyone's have; and every warp is done with chunk cc - 1
        const int ahead = cc + kStages - 1;  // into the stage chunk cc - 1 used
        if (ahead < nc) stage_x<NT>(xs + (ahead % kStages) * kStage, a, tok0, static_cast<int64_t>(ch0 + ahead) * kChunkCols);
        cp_async_commit();
        compute_chunk_smem<K, NT>(wr[j], xs + (cc % kStages) * kStage, g, t, acc);
        if (cc + D < nc) load_chunk<K>(wr[j], base, stride8, valid, ch0 + cc + D, t, a);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp done with xs (the cluster epilogue reuses it)

  // ---- epilogue ---------------------------------------------------------------------------
  constexpr int TT = NT * 8;
  if (a.ck == 1) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int64_t row = row0 + 16 * m + 8 * (k >> 1) + g;
          const int tok = tok0 + nt * 8 + 2 * t + (k & 1);
          if (row < rows && tok < a.n_tok) y[tok * y_stride + row] = acc[m][nt][k];
        }
    return;
  }
  float* red = reinterpret_cast<float*>(smem);  // [kCtaRows][TT]
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int r = warp * kWarpRows + 16 * m + 8 * (k >> 1) + g;
        red[r * TT + nt * 8 + 2 * t + (k & 1)] = acc[m][nt][k];
      }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int part = (kCtaRows + a.ck - 1) / a.ck;
  const int r_begin = slice * part, r_end = min(kCtaRows, r_begin + part);
  const int n = max(0, r_end - r_begin);
  for (int it = threadIdx.x; it < n * TT; it += kThreads) {
    const int tk = it / n, r = r_begin + it % n;
    float v = 0.0f;
    for (int q = 0; q < a.ck; ++q) v += cluster.map_shared_rank(red, q)[r * TT + tk];
    const int64_t row = cta_row0 + r;
    const int tok = tok0 + tk;
    if (row < rows && tok < a.n_tok) y[tok * y_stride + row] = v;
  }
  cluster.sync();  // no CTA leaves while its partials may still be read
}

// ---- the barrier-free variant for up to 8 tokens (one n8 tile) ---------------------------------
// A CTA of 8 warps = rw row-warps (32 rows each) x 8 / rw k-warps; a k-warp takes every
// (8 / rw)-th chunk of the row. No shared-memory staging and no barrier in the main loop: each lane
// loads its B fragments (8 + 8 bytes of its token's x per 32-column block) from global memory
// through L1 (the CTA's row-warps read the same x), D chunks of weights and x ahead in
// registers; the k-warps' sums meet in shared memory in a fixed order at the end.
constexpr int kWarpCtaThreads = 256;

template <int K>
constexpr int kWarpDepth = K == static_cast<int>(QuantKind::kQ4_0) ? 3 : 2;

__device__ __forceinline__ void load_x_chunk(uint2 (&xq)[4][2], const Args& a, int tok, int chunk, int t) {
  const int64_t c0 = static_cast<int64_t>(chunk) * kChunkCols;
#pragma unroll
  for (int blk = 0; blk < 4; ++blk) {
    const int64_t c = c0 + 32 * blk + 4 * t;
    if (tok < a.n_tok && c0 + 32 * blk < a.cols) {
      const uint2* p = reinterpret_cast<const uint2*>(a.x + tok * a.x_stride + c);
      xq[blk][0] = __ldg(p);
      xq[blk][1] = __ldg(p + 4);  // 16 columns on
    } else {
      xq[blk][0] = xq[blk][1] = make_uint2(0, 0);
    }
  }
}

// ~190 registers: one CTA of 8 warps an SM (a build for two, 126 registers and 2 chunks ahead,
// measured +1 % at 27B 8 x 32K, within the spread: docs/benchmarks.md, session 29).
template <int K>
__global__ void __launch_bounds__(kWarpCtaThreads, 1) gemm_quant_warp_kernel(Args a, int rw) {
  constexpr int D = kWarpDepth<K>;
  __shared__ float red[kWarpCtaThreads / 32][kWarpRows][8];  // [warp][row][token]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kw = kWarpCtaThreads / 32 / rw;
  const int rwi = warp / kw, kwi = warp % kw;
  const CtaWeight cw = cta_weight(a, static_cast<int>(blockIdx.x), int64_t{kWarpRows} * rw);
  const int64_t rows = cw.rows, row_bytes = cw.row_bytes, y_stride = cw.y_stride, cta_row0 = cw.row0;
  float* const y = cw.y;
  const int64_t row0 = cta_row0 + rwi * kWarpRows;
  unsigned valid = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) valid |= (row0 + 8 * i + g < rows ? 1u : 0u) << i;
  const uint8_t* base = cw.w + (row0 + g) * row_bytes;
  const int64_t stride8 = 8 * row_bytes;
  const int n_my = kwi < a.n_chunks ? (a.n_chunks - kwi + kw - 1) / kw : 0;  // chunks kwi, kwi + kw, ...

  ChunkRegs<K> wr[D];
  uint2 xq[D][4][2];
#pragma unroll
  for (int j = 0; j < D; ++j)
    if (j < n_my) load_chunk<K>(wr[j], base, stride8, valid, kwi + j * kw, t, a);
  pdl_launch_dependents();
  pdl_wait();
#pragma unroll
  for (int j = 0; j < D; ++j)
    if (j < n_my) load_x_chunk(xq[j], a, g, kwi + j * kw, t);

  float acc[2][1][4] = {};
  for (int i = 0; i < n_my; i += D) {
#pragma unroll
    for (int j = 0; j < D; ++j) {
      if (i + j < n_my) {
        compute_chunk<K, 1>(
            wr[j], [&](int blk, uint32_t (&b)[1][4]) { bfrag_of(xq[j][blk][0], xq[j][blk][1], b[0]); }, acc);
        if (i + j + D < n_my) {
          const int c = kwi + (i + j + D) * kw;
          load_chunk<K>(wr[j], base, stride8, valid, c, t, a);
          load_x_chunk(xq[j], a, g, c, t);
        }
      }
    }
  }
  // k-warps' sums in a fixed order: red[warp][row][token], then thread (row, token) of each row-warp.
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int k = 0; k < 4; ++k) red[warp][16 * m + 8 * (k >> 1) + g][2 * t + (k & 1)] = acc[m][0][k];
  __syncthreads();
  for (int it = threadIdx.x; it < rw * kWarpRows * 8; it += kWarpCtaThreads) {
    const int tok = it % 8, rr = it / 8;  // rr: row of the CTA
    const int rg = rr / kWarpRows, r = rr % kWarpRows;
    float v = 0.0f;
    for (int q = 0; q < kw; ++q) v += red[rg * kw + q][r][tok];
    const int64_t row = cta_row0 + rr;
    if (row < rows && tok < a.n_tok) y[tok * y_stride + row] = v;
  }
}

using KernelFn = void (*)(Args);

template <int K>
KernelFn pick_kernel(int nt) {
  switch (nt) {
    case 1: return gemm_quant_kernel<K, 1>;
    case 2: return gemm_quant_kernel<K, 2>;
    case 3: return gemm_quant_kernel<K, 3>;
    default: return gemm_quant_kernel<K, 4>;
  }
}

KernelFn kernel_for(QuantKind k, int nt) {
  switch (k) {
    case QuantKind::kQ4_0: return pick_kernel<static_cast<int>(QuantKind::kQ4_0)>(nt);
    case QuantKind::kQ8_0: return pick_kernel<static_cast<int>(QuantKind::kQ8_0)>(nt);
    default: return pick_kernel<static_cast<int>(QuantKind::kQ4_K)>(nt);
  }
}

size_t smem_bytes(int nt) { return size_t{kStages} * nt * 8 * kXRow * sizeof(__half); }

// Resident CTAs an SM of this kernel (cached per device, kind and tile count).
// Resident CTAs an SM of `kernel` on the current device, cached in cache[device] (at least 1).
template <typename Kernel>
int cached_occupancy(std::atomic<int> (&cache)[kMaxDevices], Kernel kernel, int threads, size_t smem) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 1;
  if (dev < kMaxDevices) {
    const int c = cache[dev].load(std::memory_order_relaxed);
    if (c > 0) return c;
  }
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem) != cudaSuccess || blocks < 1) {
    (void)cudaGetLastError();
    blocks = 1;
  }
  if (dev < kMaxDevices) cache[dev].store(blocks, std::memory_order_relaxed);
  return blocks;
}

int occupancy(QuantKind k, int nt) {
  static std::atomic<int> cache[3][kMaxTiles][kMaxDevices];
  return cached_occupancy(cache[static_cast<int>(k)][nt - 1], kernel_for(k, nt), kThreads, smem_bytes(nt));
}

int sm_count() {
  static std::atomic<int> cache[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 1;
  if (dev < kMaxDevices && cache[dev].load(std::memory_order_relaxed) > 0) return cache[dev].load();
  int n = 1;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1) n = 1;
  if (dev < kMaxDevices) cache[dev].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace

GemmQuantPlan plan_gemm_quant_blocks(QuantKind k, int64_t row_blocks, int64_t cols, int n_tok, int n_sm) {
  GemmQuantPlan p;
  if (n_tok < 1 || n_tok > kMaxGemmQuantTokens || row_blocks < 1 || !quant_cols_valid(k, cols) || n_sm < 1) return p;
  p.token_blocks = (n_tok + kMaxTiles * 8 - 1) / (kMaxTiles * 8);
  const int per_block = (n_tok + p.token_blocks - 1) / p.token_blocks;
  p.n_tiles = (per_block + 7) / 8;
  const int64_t n_chunks = (cols + kChunkCols - 1) / kChunkCols;
  const int64_t base = row_blocks * p.token_blocks;
  const int64_t slots = int64_t{occupancy(k, p.n_tiles)} * n_sm;
  // Fewest chunk steps on the busiest SM: waves of CTAs x (chunks a CTA + its fixed cost, ~8
  // chunks' worth: the pipeline's fill, the cluster's sums); ties to fewer slices. Fitted on an
  // H100 to forced splits (docs/benchmarks.md, session 24): e.g. 17408 x 5120 at 8 tokens ck 1 /
  // 2 / 4 / 8 took 45.9 / 32.7 / 39.5 / 41.1 us, 5120 x 17408 123.3 / 67.5 / 42.7 / 28.9 us.
  constexpr int64_t kCtaCostChunks = 8;
  int64_t best = -1;
  for (int ck = 1; ck <= kMaxCluster && ck <= n_chunks; ++ck) {
    const int64_t sc = (n_chunks + ck - 1) / ck;
    const int eff = static_cast<int>((n_chunks + sc - 1) / sc);  // no empty slice
    if (eff != ck) continue;
    const int64_t waves = (base * ck + slots - 1) / slots;
    const int64_t cost = waves * (sc + kCtaCostChunks);
    if (best < 0 || cost < best) {
      best = cost;
      p.ck = ck;
      p.slice_chunks = static_cast<int>(sc);
    }
  }
  return p;
}

GemmQuantPlan plan_gemm_quant(QuantKind k, int64_t rows, int64_t cols, int n_tok, int n_sm) {
  if (rows < 1) return GemmQuantPlan{};
  return plan_gemm_quant_blocks(k, (rows + kCtaRows - 1) / kCtaRows, cols, n_tok, n_sm);
}

namespace {

using WarpKernelFn = void (*)(Args, int);
WarpKernelFn warp_kernel_of(QuantKind k) {
  switch (k) {
    case QuantKind::kQ4_0: return gemm_quant_warp_kernel<static_cast<int>(QuantKind::kQ4_0)>;
    case QuantKind::kQ8_0: return gemm_quant_warp_kernel<static_cast<int>(QuantKind::kQ8_0)>;
    default: return gemm_quant_warp_kernel<static_cast<int>(QuantKind::kQ4_K)>;
  }
}

// Resident CTAs an SM of the barrier-free variant (cached per device and kind).
int warp_occupancy(QuantKind k) {
  static std::atomic<int> cache[3][kMaxDevices];
  return cached_occupancy(cache[static_cast<int>(k)], warp_kernel_of(k), kWarpCtaThreads, 0);
}

// The barrier-free variant's rows a CTA chosen by wave fill (H100, session 28: 27B 8 x 32K int8
// 418.7 -> 436.2 t/s); HS_CUDA_GEMMQ_WAVES=0: the older rule (two CTAs an SM assumed).
bool warp_rows_by_waves() {
  static const bool on = [] {
    const char* e = std::getenv("HS_CUDA_GEMMQ_WAVES");
    return !(e && e[0] == '0');
  }();
  return on;
}

// launch_ex_cluster (pdl.cuh), then the launch's error read back.
template <typename... KArgs, typename... A>
cudaError_t launch_with(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, int ck, bool pdl, cudaStream_t s,
                        const A&... args) {
  const cudaError_t e = launch_ex_cluster(kernel, grid, block, smem, ck, pdl, s, args...);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_gemm_quant_mma_multi(QuantKind k, int n_weights, const GemmQuantOut* outs, int64_t cols,
                                        const uint16_t* x16, int64_t x_stride, int n_tok, cudaStream_t s, bool pdl,
                                        const GemmQuantPlan* plan, bool warp_small) {
  if (n_weights < 1 || n_weights > kW || !outs) return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  if (!x16 || n_tok < 0 || n_tok > kMaxGemmQuantTokens || !quant_cols_valid(k, cols) ||
      reinterpret_cast<uintptr_t>(x16) % 16 != 0 || x_stride % 8 != 0 || x_stride < cols)
    return cudaErrorInvalidValue;
  int64_t total_rows = 0;
  for (int i = 0; i < n_weights; ++i) {
    const GemmQuantOut& o = outs[i];
    if (o.rows < 0 || (o.rows > 0 && (!o.w || !o.y.p || o.row_bytes < quant_device_row_bytes(k, cols) ||
                                      o.row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(o.w) % 16 != 0 ||
                                      o.y.rows != n_tok || o.y.cols != o.rows || o.y.stride < o.rows)))
      return cudaErrorInvalidValue;
    total_rows += o.rows;
  }
  if (total_rows == 0) return cudaSuccess;
  const QuantRowLayout l = quant_row_layout(k, cols);
  const int64_t n_chunks = (cols + kChunkCols - 1) / kChunkCols;
  // The weights' row blocks of `unit` rows as one list.
  auto fill = [&](Args& a, int64_t unit) -> int64_t {
    int64_t blocks = 0;
    for (int i = 0; i < n_weights; ++i) {
      a.w[i] = outs[i].w;
      a.rows[i] = outs[i].rows;
      a.row_bytes[i] = outs[i].row_bytes;
      a.y[i] = outs[i].y.p;
      a.y_stride[i] = outs[i].y.stride;
      a.block_begin[i] = static_cast<int>(std::min<int64_t>(blocks, INT32_MAX));
      blocks += (outs[i].rows + unit - 1) / unit;
    }
    for (int i = n_weights; i <= kW; ++i) a.block_begin[i] = static_cast<int>(std::min<int64_t>(blocks, INT32_MAX));
    a.n_weights = n_weights;
    a.cols = cols;
    a.scale_offset = l.scale_offset;
    a.dm_offset = l.dm_offset;
    a.x = x16;
    a.x_stride = x_stride;
    a.n_tok = n_tok;
    a.n_groups = l.groups;
    a.n_chunks = static_cast<int>(n_chunks);
    return blocks;
  };
  Args a;
  if (warp_small && n_tok <= 8 && !plan) {
    const int n_sm = sm_count();
    auto ctas_of = [&](int c) {
      int64_t ctas = 0;
      for (int i = 0; i < n_weights; ++i) ctas += (outs[i].rows + int64_t{kWarpRows} * c - 1) / (int64_t{kWarpRows} * c);
      return ctas;
    };
    int rw = 1;
    if (warp_rows_by_waves()) {
      // Rows a CTA by wave fill (the default): the kernel's resident CTAs an SM (1 at its ~190 registers) make
      // n_sm x that a wave; the fraction of the waves' slots the CTAs fill decides (a 272-CTA
      // launch on 132 SMs at one CTA an SM runs 3 waves, the last with 8 CTAs: 69 %). The best
      // fill wins; within 2 % of it, the most rows a CTA (fewer x reads).
      const int64_t slots = int64_t{n_sm} * warp_occupancy(k);
      double fill[4] = {};
      double best = 0.0;
      for (int i = 0; i < 4; ++i) {
        const int64_t ctas = ctas_of(1 << i);
        const int64_t waves = (ctas + slots - 1) / slots;
        fill[i] = static_cast<double>(ctas) / static_cast<double>(waves * slots);
        best = std::max(best, fill[i]);
      }
      for (int i = 0; i < 4; ++i)
        if (fill[i] >= best - 0.02) rw = 1 << i;
    } else {
      // Rows a CTA: the most (fewer, longer k-warps) that still give two CTAs an SM.
      for (int c : {8, 4, 2}) {
        if (ctas_of(c) >= 2LL * n_sm) {
          rw = c;
          break;
        }
      }
    }
    const int64_t blocks = fill(a, int64_t{kWarpRows} * rw);
    if (blocks > INT32_MAX) return cudaErrorInvalidValue;
    return launch_with(warp_kernel_of(k), dim3(static_cast<unsigned>(blocks)), dim3(kWarpCtaThreads), 0, 1, pdl, s, a,
                       rw);
  }
  const int64_t blocks = fill(a, kCtaRows);
  if (blocks > 65535) return cudaErrorInvalidValue;
  const GemmQuantPlan p = plan ? *plan : plan_gemm_quant_blocks(k, blocks, cols, n_tok, sm_count());
  if (p.ck < 1 || p.ck > kMaxCluster || p.n_tiles < 1 || p.n_tiles > kMaxTiles || p.slice_chunks < 1 ||
      (p.ck - 1) * int64_t{p.slice_chunks} >= n_chunks || p.ck * int64_t{p.slice_chunks} < n_chunks ||
      int64_t{p.token_blocks} * p.n_tiles * 8 < n_tok || p.token_blocks > 65535)
    return cudaErrorInvalidValue;
  a.slice_chunks = p.slice_chunks;
  a.ck = p.ck;
  return launch_with(kernel_for(k, p.n_tiles),
                     dim3(static_cast<unsigned>(p.ck), static_cast<unsigned>(blocks), static_cast<unsigned>(p.token_blocks)),
                     dim3(kThreads), smem_bytes(p.n_tiles), p.ck, pdl, s, a);
}

cudaError_t launch_gemm_quant_mma(QuantKind k, const uint8_t* w, int64_t rows, int64_t cols, int64_t w_row_bytes,
                                  const uint16_t* x16, int64_t x_stride, int n_tok, Rows y, cudaStream_t s, bool pdl,
                                  const GemmQuantPlan* plan, bool warp_small) {
  if (rows == 0 || n_tok == 0) return cudaSuccess;
  if (!w || !y.p) return cudaErrorInvalidValue;
  const GemmQuantOut o{w, rows, w_row_bytes, y};
  return launch_gemm_quant_mma_multi(k, 1, &o, cols, x16, x_stride, n_tok, s, pdl, plan, warp_small);
}

}  // namespace hs::cuda
