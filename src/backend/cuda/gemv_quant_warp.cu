// backend/cuda/gemv_quant_warp.cu — batch-1/2 GEMV on Q4_0 / Q8_0 / Q4_K device rows with int16
// activations and dp2a (launch_gemv_quant_warp in gemv_quant_warp.h).
//
// Owns the x quantization kernel, its scratch layout, the warp-per-rows dot-product kernel and
// their launch plan. Cost model: batch-1 decode is a pure weight stream, so the main kernel keeps
// 8 16-byte quant loads (plus their scale loads) in flight per lane, issues few instructions per
// weight byte (see "Instruction budget") and reads x from L1; x quantization is one tiny kernel
// (a warp per 32 columns and token, ~2.5 bytes written per column and token) whose run time the
// main kernel overlaps through programmatic dependent launch.
//
// ---- x scratch: [NU u-steps][T tokens][record], NU = ceil(groups / 8) -----------------------------
// A u-step is what one warp instruction of the main kernel loads from one weight row: 32 lanes x
// 16 bytes = 8 groups (quant_layout.h). Lane L (qd = L / 4: group 8u + qd, t = L % 4) holds 4
// bytes of each block of its group (Q4: 4 blocks, nibble bytes qs[4t .. 4t+3]; Q8: 2 blocks x 2
// words, qs[4t ..] and qs[16 + 4t ..]), i.e. the 8 elements E(t) = {4t .. 4t+3, 16+4t .. 16+4t+3}
// of each block. A token's record of one u-step, laid out so every main-kernel load of x is 16
// bytes a lane and one 128-byte line per 8 lanes:
//   X [B][32 lanes] x 16 B      int16 q of block B (8u + qd) + j, elements E(t) in order
//                               (B = 4 Q4_0 / Q4_K, 2 Q8_0): 2048 / 1024 B
//   Q4_0: C [32 lanes] x int4   c0 = 0x4B400000 - 8 * sum_E(t) q for the lane's 4 blocks (512 B)
//         D dx [8][4], then mdx [8][4] f32 (mdx = -1.5 * 2^23 * dx, exact)           (256 B)
//   Q4_K: D as Q4_0 (256 B); S sx [8][4] f32 (sx = dx * the block's sum of q)      (128 B)
//   Q8_0: D dx [8][2] f32                                                                (64 B)
// Record bytes: Q4_0 2816 (2.75 per column), Q4_K 2432, Q8_0 1088 (2.1). Columns past cols (up to
// the u-step) hold q = 0 with a finite dx, so the zero-padded weights there contribute exactly 0.
//
// ---- x quantization --------------------------------------------------------------------------------
// dx = max|x| / 32767 rounded up to a multiple of 4 ulps (so 1.5 * 2^23 * dx is exact), max|x|
// clamped below at 2^-100 (dx stays normal); q = rint(x / dx), |x - q dx| <= 0.504 dx. A block
// with a NaN / inf gets dx = NaN: every output of that token is NaN.
//
// ---- dot products ------------------------------------------------------------------------------------
// Per lane, row, block part (8 elements): S = sum q_w * q_x with 4 dp2a (IDP.2A: x int16 pairs
// times weight bytes; Q4 nibbles w & 0x0F0F0F0F and (w >> 4) & 0x0F0F0F0F, Q8 bytes as loaded).
//  * Q4_0 / Q4_K: the dp2a chain starts at c0 (Q4_0: the -8 offset as -8 sum q_x, plus the magic
//    1.5 * 2^23) / at the magic (Q4_K). |S| < 2^22 (Q4_0 8*8*32767, Q4_K 8*15*32767), so the
//    int bits read as a float are exactly 1.5 * 2^23 + S and fmaf(f, dx, mdx) = round(S dx) in
//    one rounding, no conversion. Then acc += (S dx) * d (d: f16 block scale; Q4_K d*sc, exact).
//  * Q4_K's mins: lane t owns sub-block t of its group: acc -= (dmin * m_t) * sx_t.
//  * Q8_0: |S| <= 8*128*32767 needs I2FP: acc += (float(S) * dx) * d.
// A lane's R x T accumulators are summed over the warp by a reduce-scatter butterfly
// (log2(R T) exchange stages, then plain ones; a fixed order for a given R and T).
//
// ---- instruction budget (ptxas 13.0 SASS of the main loop, full trips) --------------------------------
// At 4.27 TB/s an H200 SMSP receives one warp-wide 16-byte quant load (512 B, 576 B with the
// scales) every ~141 cycles at 1.98 GHz, so the issue slots per "16 B of quants a lane and row"
// must stay well under ~141 (and the IDP pipe, ~2 cycles a warp instruction, under ~70).
// Measured, per 16 B a lane and row (planner's R in brackets):
//   Q4_0  T=1 (R 2) 50.0: IDP 16, FFMA 8, LOP3 8, SHF 4, HADD2 4, LDG 5.5, addressing ~4.5
//         T=2 (R 4) 76.0: IDP 32, FFMA 16, LOP3 8, SHF 4, HADD2 4, LDG 5.5, ~6.5
//   Q4_K  T=1 (R 2) 64.5;  T=2 (R 4) 92.2  (+ d*sc / dmin*m: PRMT 5, FFMA 6, FMUL 2 a row)
//   Q8_0  T=1 (R 1) 26.5;  T=2 (R 2) 40.0  (per 16 B = 16 weights, half of Q4's)
// i.e. 20-65 % of the issue rate at the copy bandwidth (Q4_0 35 / 54 %, Q4_K 45 / 64 %, Q8_0
// 20 / 30 % at 1 / 2 tokens): memory-bound with margin except Q4_K at two tokens. Registers 70-128 (__launch_bounds__(256, 2): 16 warps an SM), no spills.
// L1: per u-step and token the x loads are 19-22 wavefronts (Q4) against 5-6 of weights a row, so
// R = 2 T keeps L1 near 50 % of its 128 B/clk at 4.27 TB/s.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cstdint>
#include <cstdlib>

#include "backend/cuda/gemv_quant_warp.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_decode.cuh"
#include "backend/cuda/quant_x.cuh"
#include "backend/cuda/weight_loads.cuh"

namespace hs::cuda {
namespace {

using quant_x::kMagic;
using quant_x::kMagicBits;
using quant_x::kQ40;
using quant_x::kQ4K;
using quant_x::kQ80;
using quant_x::xrec;
using quant_x::XRec;
constexpr int kLoadsInFlight = 8;  // 16-byte quant loads a lane issues per step (R x U)

// u-steps of a row of `cols` columns of kind k.
// Tokens of the launch that covers rows [first, first + its count) of n_rows: chunks of
// kMaxQuantWarpTokens; 3 tokens run as 4 (a padded slot).
int chunk_tokens(int n_rows, int first) { return std::min(kMaxQuantWarpTokens, n_rows - first); }
int padded_tokens(int n) { return n == 3 ? 4 : n; }
int x_steps(int k, int64_t cols) { return static_cast<int>(quant_x::u_steps(k, cols)); }
// Scratch bytes of kind k for n_tok tokens (a multiple of 256).
int64_t x_scratch_bytes(int k, int64_t cols, int n_tok) {
  return (int64_t{x_steps(k, cols)} * n_tok * xrec(k).bytes + 255) / 256 * 256;
}

// ---- device helpers ----------------------------------------------------------------------


// x scratch loads: through L1 (every warp of the SM reads the same x).
__device__ __forceinline__ uint4 ld_x16(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ float4 ld_xf4(const uint8_t* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// c + sum of the 8 products of one block part: x = 4 words of int16 pairs (elements 4t..4t+3,
// 16+4t..16+4t+3), a / b = the weight bytes of elements 4t.. / 16+4t.. .
__device__ __forceinline__ int dot8(const uint4& x, uint32_t a, uint32_t b, int c) {
  c = __dp2a_lo(static_cast<int>(x.x), static_cast<int>(a), c);
  c = __dp2a_hi(static_cast<int>(x.y), static_cast<int>(a), c);
  c = __dp2a_lo(static_cast<int>(x.z), static_cast<int>(b), c);
  c = __dp2a_hi(static_cast<int>(x.w), static_cast<int>(b), c);
  return c;
}

__device__ __forceinline__ float comp(const float4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }
__device__ __forceinline__ int compi(const int4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }
__device__ __forceinline__ uint32_t compu(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// ---- kernel 1: x -> int16 scratch ------------------------------------------------------------

struct QuantXArgs {
  const float* x = nullptr;
  int64_t x_stride = 0, cols = 0;
  int rows = 1;          // x rows; a padded token slot (gridDim.y > rows) repeats the last row
  uint8_t* s = nullptr;  // scratch [nu][n_tok][xrec(K).bytes]
  int nu = 0;            // u-steps
};

// grid (nu * B, n_tok) CTAs of 8 warps (B = 32-column blocks a group): warp w of CTA (x, tok)
// quantizes block 8 x + w of token tok (blocks past cols: zeros).
template <int K>
__global__ void __launch_bounds__(256) quantize_x_kernel(QuantXArgs a) {
  pdl_launch_dependents();  // the main kernel may start streaming weights now
  pdl_wait();               // x: the preceding kernel's output (a no-op unless launched with pdl_x)
  const int lane = threadIdx.x & 31;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);  // block of the token
  const int tok = blockIdx.y;
  const int64_t col = 32 * b + lane;
  const float v = col < a.cols ? a.x[min(tok, a.rows - 1) * a.x_stride + col] : 0.0f;
  quant_x::store_block<K>(v, lane, b, tok, gridDim.y, a.s);
}

// ---- kernel 2: the GEMV -------------------------------------------------------------------------

// One weight of a launch: its rows, output and first warp (the launch's warps run over the
// weights back to back, each weight's rows starting at a fresh warp).
struct MainSeg {
  const uint8_t* w = nullptr;
  int64_t rows = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
  int64_t warp_begin = 0;
};

struct MainArgs {
  MainSeg seg[kMaxQuantWarpWeights];
  int n_seg = 1;
  int64_t warps = 0;           // all segments' warps
  int64_t row_bytes = 0;
  int groups = 0;              // G
  int nu = 0;                  // u-steps
  int64_t scale_off = 0;       // quant_layout.h: 64 G
  int64_t dm_off = 0;          // Q4_K: 72 G
  const uint8_t* s = nullptr;  // x scratch [nu][T][xrec(K).bytes]
  int n_tok = 1;               // tokens written (T may be one more: a padded slot)
};

// What a lane loads of one row for one u-step.
struct WRegs {
  uint4 q;       // 16 bytes of quants
  uint2 sc;      // Q4_0: 4 x f16 d; Q8_0: .x = 2 x f16 d; Q4_K: .x = sc[4], .y = m[4]
  uint32_t dm;   // Q4_K: (d, dmin) f16
};

// Scale bytes of one group: 8 (Q4_0: 4 x d; Q4_K: sc[4] m[4]) or 4 (Q8_0: 2 x d).
template <int K>
constexpr int kScaleBytes = K == kQ80 ? 4 : 8;

// Loads group g's part of lane t from a row (q at q_base + 64 g + 16 t, ...). For a full trip
// the caller passes per-lane bases and constant offsets, so the loads use immediate offsets.
template <int K>
__device__ __forceinline__ void load_w(WRegs& r, const uint8_t* q, const uint8_t* sc, const uint8_t* dm) {
  r.q = ld_w16(q);
  if constexpr (K == kQ80) {
    r.sc.x = ld_w4(sc);
  } else {
    r.sc = ld_w8(sc);
  }
  if constexpr (K == kQ4K) r.dm = ld_w4(dm);
}

// The lane's bases in the x scratch record of (u-step, token 0); token k at + k * xrec(K).bytes.
struct XPtrs {
  const uint8_t* x;  // X[0][lane] (Q4_0: C[lane] at + xrec.c)
  const uint8_t* d;  // D[qd]
  const uint8_t* s;  // Q4_K: S[qd] + 4 t
};

// acc[i][tok] += the lane's part of one u-step of rows i (w[i]) against the scratch at p.
template <int K, int T, int R>
__device__ __forceinline__ void compute_step(const WRegs (&w)[R], const XPtrs& p, int t, float (&acc)[R][T]) {
  constexpr XRec Z = xrec(K);
  if constexpr (K == kQ80) {
    float2 dx[T];
#pragma unroll
    for (int k = 0; k < T; ++k) dx[k] = __ldg(reinterpret_cast<const float2*>(p.d + k * Z.bytes));
    float dw[R][2];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      dw[i][0] = h_lo(w[i].sc.x);
      dw[i][1] = h_hi(w[i].sc.x);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int k = 0; k < T; ++k) {
        const uint4 xv = ld_x16(p.x + k * Z.bytes + j * 512);
        const float dxj = j == 0 ? dx[k].x : dx[k].y;
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const int sdot = dot8(xv, compu(w[i].q, 2 * j), compu(w[i].q, 2 * j + 1), 0);
          acc[i][k] = fmaf(static_cast<float>(sdot) * dxj, dw[i][j], acc[i][k]);
        }
      }
    }
  } else {
    // Up to 2 tokens the per-token scales of the u-step (dx, mdx, Q4_0's c0: 12 registers a token)
    // are loaded once up front; from 3 tokens they are loaded per block j where they are used
    // (scalar L1 loads, broadcast within the lane quad), so Q4 at 4 tokens does not spill.
    constexpr bool kLazy = T > 2;
    constexpr int TE = kLazy ? 1 : T;  // register copies held
    float4 dx[TE], mdx[TE];
    int4 c0[TE];
    float sx[T];
#pragma unroll
    for (int k = 0; k < T; ++k) {
      if constexpr (!kLazy) {
        dx[k] = ld_xf4(p.d + k * Z.bytes);
        mdx[k] = ld_xf4(p.d + k * Z.bytes + 128);
        if constexpr (K == kQ40) c0[k] = __ldg(reinterpret_cast<const int4*>(p.x + k * Z.bytes + Z.c));
      }
      if constexpr (K == kQ4K) sx[k] = __ldg(reinterpret_cast<const float*>(p.s + k * Z.bytes));
    }
    float dw[R][4];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if constexpr (K == kQ40) {
        dw[i][0] = h_lo(w[i].sc.x);
        dw[i][1] = h_hi(w[i].sc.x);
        dw[i][2] = h_lo(w[i].sc.y);
        dw[i][3] = h_hi(w[i].sc.y);
      } else {
        // d * sc exactly: (2^23 + sc) * d - 2^23 d in one rounding (the product has <= 17 bits).
        const float d = h_lo(w[i].dm), dmin = h_hi(w[i].dm);
        const float nd = -8388608.0f * d;
#pragma unroll
        for (int j = 0; j < 4; ++j)
          dw[i][j] = fmaf(__uint_as_float(__byte_perm(w[i].sc.x, 0x4B000000u, 0x7440 + j)), d, nd);
        // The mins of sub-block t: acc -= (dmin * m_t) * sx_t (dmin * m_t exact, as ggml's).
        const float m23 = __uint_as_float(__byte_perm(w[i].sc.y, 0x4B000000u, 0x7440 + t));
        const float nmin = fmaf(m23, -dmin, 8388608.0f * dmin);  // -(dmin * m_t)
#pragma unroll
        for (int k = 0; k < T; ++k) acc[i][k] = fmaf(nmin, sx[k], acc[i][k]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t lo[R], hi[R];
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const uint32_t wq = compu(w[i].q, j);
        lo[i] = wq & 0x0F0F0F0Fu;
        hi[i] = (wq >> 4) & 0x0F0F0F0Fu;
      }
#pragma unroll
      for (int k = 0; k < T; ++k) {
        const uint4 xv = ld_x16(p.x + k * Z.bytes + j * 512);
        int cst;
        float dxj, mdxj;
        if constexpr (kLazy) {
          cst = K == kQ40 ? __ldg(reinterpret_cast<const int*>(p.x + k * Z.bytes + Z.c) + j) : static_cast<int>(kMagicBits);
          dxj = __ldg(reinterpret_cast<const float*>(p.d + k * Z.bytes) + j);
          mdxj = __ldg(reinterpret_cast<const float*>(p.d + k * Z.bytes + 128) + j);
        } else {
          cst = K == kQ40 ? compi(c0[k], j) : static_cast<int>(kMagicBits);
          dxj = comp(dx[k], j);
          mdxj = comp(mdx[k], j);
        }
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const float f = __int_as_float(dot8(xv, lo[i], hi[i], cst));  // 1.5 * 2^23 + S exactly
          acc[i][k] = fmaf(fmaf(f, dxj, mdxj), dw[i][j], acc[i][k]);   // += round(S dx) * d
        }
      }
    }
  }
}

// Loads trip u0's U u-steps of the warp's R rows into w: wq / ws / wd are the lane's bases at
// u-step u0 (group 8 u0 + qd). A full trip uses constant offsets; the last one re-reads the last
// group for lanes past it (their x is zero) and leaves u-steps past the row zero.
template <int K, int U, int R>
__device__ __forceinline__ void load_trip(WRegs (&w)[U][R], const uint8_t* const (&wq)[R], const uint8_t* const (&ws)[R],
                                          const uint8_t* const (&wd)[R], int u0, int nu, int groups, int lane) {
  constexpr int SB = kScaleBytes<K>;
  const int qd = lane >> 2, t = lane & 3;
  if (8 * (u0 + U) <= groups) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < R; ++i) load_w<K>(w[u][i], wq[i] + 512 * u, ws[i] + 8 * SB * u, wd[i] + 16 * u);
  } else {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u0 + u < nu) {
        const int g = min(8 * (u0 + u) + qd, groups - 1) - 8 * u0;  // relative to the trip
#pragma unroll
        for (int i = 0; i < R; ++i)
          load_w<K>(w[u][i], wq[i] - 16 * lane + 64 * g + 16 * t, ws[i] - SB * qd + SB * g,
                    wd[i] - 4 * (qd >> 1) + 4 * (g >> 1));
      } else {
#pragma unroll
        for (int i = 0; i < R; ++i) w[u][i] = WRegs{};
      }
    }
  }
}

// grid: ceil(rows / (R * warps)) CTAs of `warps` warps; warp w of CTA b owns rows
// (b * warps + w) * R .. + R - 1. Each loop trip loads U u-steps of all R rows (R U = 8 16-byte
// quant loads a lane in flight, plus their scales), then waits and computes them.
// Pipe: the trips are software-pipelined with half the u-steps a trip: trip i + 1's loads are
// issued before trip i is computed, so a lane has loads in flight while it computes (the same
// registers as the plain loop: two buffers of U / 2).
template <int K, int T, int R, int MinCtas, bool Pipe>
__global__ void __launch_bounds__(256, MinCtas) gemv_quant_warp_kernel(MainArgs a) {
  // u-steps per loop trip; 3 CTAs an SM (85 registers) keep 6 loads a lane in flight, not 8:
  // 24 warps x 6 are more bytes in flight an SM than 16 x 8, and 8 would spill.
  constexpr int U0 = MinCtas >= 3 ? (R == 1 ? 6 : 2) : kLoadsInFlight / R;
  constexpr int U = Pipe ? (U0 >= 2 ? U0 / 2 : 1) : U0;
  constexpr int V = R * T;               // accumulators per lane
  static_assert((V & (V - 1)) == 0 && V <= 16, "the reduce-scatter takes a power of two up to 16 values");
  constexpr int kLogV = V >= 16 ? 4 : V >= 8 ? 3 : V >= 4 ? 2 : V >= 2 ? 1 : 0;
  constexpr int SB = kScaleBytes<K>;
  constexpr int kStep = T * xrec(K).bytes;  // x scratch bytes of one u-step
  const int lane = threadIdx.x & 31;
  const int qd = lane >> 2, t = lane & 3;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (gw >= a.warps) return;
  // The warp's weight (selects by comparison: no dynamic indexing of the parameter block).
  const int si = (a.n_seg > 1 && gw >= a.seg[1].warp_begin) + (a.n_seg > 2 && gw >= a.seg[2].warp_begin) +
                 (a.n_seg > 3 && gw >= a.seg[3].warp_begin);
  auto pick = [&](auto MainSeg::*f) {
    return si == 0 ? a.seg[0].*f : si == 1 ? a.seg[1].*f : si == 2 ? a.seg[2].*f : a.seg[3].*f;
  };
  const uint8_t* const wbase = pick(&MainSeg::w);
  const int64_t rows = pick(&MainSeg::rows);
  float* const y = pick(&MainSeg::y);
  const int64_t y_stride = pick(&MainSeg::y_stride);
  const int64_t row0 = (gw - pick(&MainSeg::warp_begin)) * R;
  if (row0 >= rows) return;
  // Per-lane bases at u-step 0 (group qd): quants, scales, Q4_K's (d, dmin).
  const uint8_t* wq[R];
  const uint8_t* ws[R];
  const uint8_t* wd[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const uint8_t* row = wbase + min(row0 + i, rows - 1) * a.row_bytes;  // past the end: a copy
    wq[i] = row + 16 * lane;
    ws[i] = row + a.scale_off + SB * qd;
    wd[i] = row + a.dm_off + 4 * (qd >> 1);
  }
  XPtrs xp;
  xp.x = a.s + 16 * lane;
  xp.d = a.s + xrec(K).d + (K == kQ80 ? 8 : 16) * qd;
  xp.s = a.s + xrec(K).s + 16 * qd + 4 * t;

  float acc[R][T];
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int k = 0; k < T; ++k) acc[i][k] = 0.0f;

  const int nu = a.nu;
  const int groups = a.groups;
  auto advance = [&] {  // the weight bases to the next trip
#pragma unroll
    for (int i = 0; i < R; ++i) {
      wq[i] += 512 * U;
      ws[i] += 8 * SB * U;
      wd[i] += 16 * U;
    }
  };
  auto compute_trip = [&](const WRegs (&w)[U][R], int u0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u0 + u < nu) {
        XPtrs p;
        p.x = xp.x + kStep * u;
        p.d = xp.d + kStep * u;
        p.s = xp.s + kStep * u;
        compute_step<K, T, R>(w[u], p, t, acc);
      }
    }
    xp.x += kStep * U;
    xp.d += kStep * U;
    xp.s += kStep * U;
  };
  if constexpr (Pipe) {
    // Two buffers in turn (the loop body is unrolled by two so neither is copied).
    WRegs wa[U][R], wb[U][R];
    load_trip<K, U, R>(wa, wq, ws, wd, 0, nu, groups, lane);
    advance();
    pdl_wait();  // x scratch is written by the quantize kernel
    for (int u0 = 0; u0 < nu; u0 += 2 * U) {
      if (u0 + U < nu) {
        load_trip<K, U, R>(wb, wq, ws, wd, u0 + U, nu, groups, lane);
        advance();
      }
      compute_trip(wa, u0);
      if (u0 + U >= nu) break;
      if (u0 + 2 * U < nu) {
        load_trip<K, U, R>(wa, wq, ws, wd, u0 + 2 * U, nu, groups, lane);
        advance();
      }
      compute_trip(wb, u0 + U);
    }
  } else {
    for (int u0 = 0; u0 < nu; u0 += U) {
      WRegs w[U][R];
      load_trip<K, U, R>(w, wq, ws, wd, u0, nu, groups, lane);
      if (u0 == 0) pdl_wait();  // x scratch is written by the quantize kernel
      compute_trip(w, u0);
      advance();
    }
  }

  // Reduce-scatter over the warp: after stage s (mask 16 >> s) a lane keeps the half of its
  // values selected by that lane bit; then plain butterflies on the last value.
  float v[V];
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int k = 0; k < T; ++k) v[i * T + k] = acc[i][k];
  int idx = 0;
#pragma unroll
  for (int s = 0; s < kLogV; ++s) {
    const int half = V >> (s + 1);
    const int m = 16 >> s;
    const bool up = (lane & m) != 0;
#pragma unroll
    for (int k = 0; k < half; ++k) {
      const float send = up ? v[k] : v[k + half];
      const float keep = up ? v[k + half] : v[k];
      v[k] = keep + __shfl_xor_sync(0xffffffffu, send, m);
    }
    if (up) idx += half;
  }
#pragma unroll
  for (int m = 16 >> kLogV; m > 0; m >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], m);
  if ((lane & ((32 >> kLogV) - 1)) == 0) {
    const int i = idx / T, k = idx % T;
    if (row0 + i < rows && k < a.n_tok) y[k * y_stride + row0 + i] = v[0];
  }
}

// ---- host side -------------------------------------------------------------------------------


// Once per kernel and device: prefer the largest L1 (no shared memory is used; x lives in L1).
// cudaFuncSetAttribute is a host call, legal while a stream is being captured.
template <typename Kernel>
void prefer_l1(Kernel kernel, std::atomic<uint64_t>& done) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return;
  const uint64_t bit = uint64_t{1} << dev;
  if (done.load(std::memory_order_relaxed) & bit) return;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 0) == cudaSuccess)
    done.fetch_or(bit, std::memory_order_relaxed);
  (void)cudaGetLastError();  // a refused hint is not an error of the launch
}

template <typename Args>
cudaError_t launch(void (*kernel)(Args), dim3 grid, unsigned threads, bool pdl, cudaStream_t s, const Args& args) {
  return launch_kernel(kernel, grid, dim3(threads, 1, 1), 0, pdl, s, args);
}

template <int K, int T, int R, int MinCtas, bool Pipe = false>
cudaError_t launch_main(const MainArgs& a, int warps, bool pdl, cudaStream_t s) {
  static std::atomic<uint64_t> l1_set{0};
  const int64_t ctas = (a.warps + warps - 1) / warps;
  if (ctas > 0x7fffffff) return cudaErrorInvalidValue;
  prefer_l1(gemv_quant_warp_kernel<K, T, R, MinCtas, Pipe>, l1_set);
  return launch(gemv_quant_warp_kernel<K, T, R, MinCtas, Pipe>, dim3(static_cast<unsigned>(ctas), 1, 1),
                32 * static_cast<unsigned>(warps), pdl, s, a);
}

template <int K, int T>
cudaError_t launch_rt(const MainArgs& a, const QuantWarpPlan& p, cudaStream_t s) {
  if constexpr (T == 1) {
    if (p.pipelined && p.min_ctas_per_sm == 3) switch (p.rows_per_warp) {
      case 1: return launch_main<K, T, 1, 3, true>(a, p.warps_per_cta, p.pdl, s);
      case 2: return launch_main<K, T, 2, 3, true>(a, p.warps_per_cta, p.pdl, s);
      default: return cudaErrorInvalidValue;
      }
    if (p.pipelined) switch (p.rows_per_warp) {
      case 1: return launch_main<K, T, 1, 2, true>(a, p.warps_per_cta, p.pdl, s);
      case 2: return launch_main<K, T, 2, 2, true>(a, p.warps_per_cta, p.pdl, s);
      case 4: return launch_main<K, T, 4, 2, true>(a, p.warps_per_cta, p.pdl, s);
      default: return cudaErrorInvalidValue;
      }
    if (p.min_ctas_per_sm == 3) switch (p.rows_per_warp) {
      case 1: return launch_main<K, T, 1, 3>(a, p.warps_per_cta, p.pdl, s);
      case 2: return launch_main<K, T, 2, 3>(a, p.warps_per_cta, p.pdl, s);
      default: return cudaErrorInvalidValue;
      }
  }
  switch (p.rows_per_warp) {
    case 1: return launch_main<K, T, 1, 2>(a, p.warps_per_cta, p.pdl, s);
    case 2: return launch_main<K, T, 2, 2>(a, p.warps_per_cta, p.pdl, s);
    case 4: return launch_main<K, T, 4, 2>(a, p.warps_per_cta, p.pdl, s);
    default: return cudaErrorInvalidValue;
  }
}

template <int K>
cudaError_t launch_quantize(const QuantXArgs& qa, int n_tok, bool pdl, cudaStream_t s) {
  constexpr int B = quant_x::blocks_per_group(K);  // 8 B blocks (warps) per u-step
  return launch(quantize_x_kernel<K>, dim3(static_cast<unsigned>(qa.nu * B), static_cast<unsigned>(n_tok), 1), 256, pdl,
                s, qa);
}

template <int K>
cudaError_t launch_kind(const QuantXArgs& qa, const MainArgs& a, int n_tok, const QuantWarpPlan& p, bool x_ready,
                        cudaStream_t s) {
  if (!x_ready) {
    const cudaError_t e = launch_quantize<K>(qa, n_tok, p.pdl_x, s);
    if (e != cudaSuccess) return e;
  }
  if (n_tok == 1) return launch_rt<K, 1>(a, p, s);
  if (n_tok == 2) return launch_rt<K, 2>(a, p, s);
  if constexpr (K != kQ4K) return launch_rt<K, 4>(a, p, s);  // 3 or 4 tokens
  return cudaErrorInvalidValue;
}

bool plan_ok(const QuantWarpPlan& p, int n_tok) {
  if (p.pipelined && n_tok != 1) return false;
  if (p.min_ctas_per_sm != 2 && !(p.min_ctas_per_sm == 3 && n_tok == 1 && p.rows_per_warp <= 2)) return false;
  return (p.rows_per_warp == 1 || p.rows_per_warp == 2 || p.rows_per_warp == 4) &&
         (p.warps_per_cta == 1 || p.warps_per_cta == 2 || p.warps_per_cta == 4 || p.warps_per_cta == 8);
}

}  // namespace

QuantWarpPlan plan_gemv_quant_warp(QuantKind k, int64_t rows, int64_t cols, int n_tok, int n_sm) {
  (void)cols;
  QuantWarpPlan p;
  n_sm = std::max(1, n_sm);
  n_tok = padded_tokens(std::min(std::max(n_tok, 1), kMaxQuantWarpTokens));  // R follows the launch's T
  // x comes from L1 once per warp for all its rows: Q4 rows need R = 2 T to keep that stream
  // (~5 bytes of L1 wavefronts per weight byte and token) near half of L1's 128 B/clk; Q8 R = T.
  // (4 tokens: R = 4, the most rows a warp takes.)
  int r = std::min(k == QuantKind::kQ8_0 ? n_tok : 2 * n_tok, 4);
  // Small matrices (the k / v projections) are latency-bound: at least 2 warps an SM.
  while (r > 1 && rows / r < 2 * int64_t{n_sm}) r /= 2;
  p.rows_per_warp = r;
  // Small CTAs (no shared memory, no barriers) balance the SMs' share of rows to ~1/8 of a CTA.
  const int64_t warps = (rows + r - 1) / r;
  p.warps_per_cta = 8;
  while (p.warps_per_cta > 2 && (warps + p.warps_per_cta - 1) / p.warps_per_cta < 8 * int64_t{n_sm})
    p.warps_per_cta /= 2;
  p.pdl = true;
  // The quantize kernel also starts as a dependent of the kernel before it (the norm / GLU /
  // attention output it quantizes; it waits for it before reading and writes only after):
  // tg128 Q4_0 on the 8B shape 436 -> 452 t/s (docs/benchmarks.md, session 11). HS_CUDA_PDL_X=0 turns it off.
  static const bool pdl_x = [] {
    const char* e = std::getenv("HS_CUDA_PDL_X");
    return !(e && e[0] == '0');
  }();
  p.pdl_x = pdl_x;
  // One token of Q4_0 / Q8_0: 24 resident warps an SM instead of 16 (compiled for 85 registers,
  // fewer loads a lane in flight: see the kernel), so a 5,120-row matrix's 2,560 warps run in one
  // wave of 3,168 rather than 1.2 of 2,112. Q4_K spills at 85. HS_CUDA_QW_CTAS=2 keeps 16 warps.
  static const bool ctas3 = [] {
    const char* e = std::getenv("HS_CUDA_QW_CTAS");
    return !(e && e[0] == '2');
  }();
  if (n_tok == 1 && k != QuantKind::kQ4_K && ctas3) {
    p.min_ctas_per_sm = 3;
    p.rows_per_warp = std::min(p.rows_per_warp, 2);
  }
  // One token: the software-pipelined main loop (H100, session 28: 27B tg128 134.2 -> 137.2, 8B
  // 430 -> 446; docs/benchmarks.md). HS_CUDA_QW_PIPE=0: the plain loop.
  static const bool pipe = [] {
    const char* e = std::getenv("HS_CUDA_QW_PIPE");
    return !(e && e[0] == '0');
  }();
  p.pipelined = pipe && n_tok == 1;
  return p;
}

namespace {
// Scratch bytes of the chunks before row `first` (each chunk's records start 256-aligned).
// One launch pair (quantize + main) of at most kMaxQuantWarpTokens tokens (defined below).
cudaError_t launch_chunk(QuantKind k, int n_w, const QuantWarpOut* outs, int64_t cols, int64_t w_row_bytes, CRows x,
                         void* scratch, cudaStream_t s, const QuantWarpPlan* plan, bool x_ready, int64_t total_rows,
                         const QuantRowLayout& rl);
int64_t chunk_scratch_offset(int k, int64_t cols, int n_rows, int first) {
  int64_t off = 0;
  for (int f = 0; f < first; f += kMaxQuantWarpTokens) off += x_scratch_bytes(k, cols, padded_tokens(chunk_tokens(n_rows, f)));
  return off;
}
}  // namespace

size_t gemv_quant_warp_scratch_bytes(int64_t cols, int n_rows) {
  if (cols <= 0 || n_rows <= 0) return 0;
  int64_t m = 0;
  for (int k : {kQ40, kQ80, kQ4K}) m = std::max(m, chunk_scratch_offset(k, cols, n_rows, n_rows));
  return static_cast<size_t>(m);
}

cudaError_t launch_gemv_quant_warp_multi(QuantKind k, int n_w, const QuantWarpOut* outs, int64_t cols,
                                         int64_t w_row_bytes, CRows x, void* scratch, cudaStream_t s,
                                         const QuantWarpPlan* plan, bool x_ready) {
  if (n_w < 1 || n_w > kMaxQuantWarpWeights || !outs) return cudaErrorInvalidValue;
  const int kk = static_cast<int>(k);
  if (kk < kQ40 || kk > kQ4K || !quant_cols_valid(k, cols) || cols > (int64_t{1} << 24)) return cudaErrorInvalidValue;
  if (!x.p || !scratch || reinterpret_cast<uintptr_t>(scratch) % 16 != 0) return cudaErrorInvalidValue;
  if (x.rows > kMaxQuantWarpRows || x.cols != cols || x.stride < cols) return cudaErrorInvalidValue;
  if (x.rows > 0 && !quant_warp_takes(k, static_cast<int>(x.rows))) return cudaErrorInvalidValue;
  int64_t total_rows = 0;
  for (int i = 0; i < n_w; ++i) {
    const QuantWarpOut& o = outs[i];
    if (o.rows < 0 || o.rows > 0x7fffffff) return cudaErrorInvalidValue;
    if (o.rows == 0) continue;
    if (!o.w || !o.y.p || reinterpret_cast<uintptr_t>(o.w) % 16 != 0) return cudaErrorInvalidValue;
    if (o.y.rows != x.rows || o.y.cols != o.rows || o.y.stride < o.rows) return cudaErrorInvalidValue;
    total_rows += o.rows;
  }
  if (total_rows == 0 || x.rows <= 0) return cudaSuccess;
  const QuantRowLayout rl = quant_row_layout(k, cols);
  if (w_row_bytes < rl.row_bytes || w_row_bytes % 16 != 0) return cudaErrorInvalidValue;
  const int n_rows = static_cast<int>(x.rows);
  // More than kMaxQuantWarpTokens tokens: one launch pair per chunk, each with its own records.
  for (int first = 0; first < n_rows; first += kMaxQuantWarpTokens) {
    const int n_tok = chunk_tokens(n_rows, first);
    QuantWarpOut sub[kMaxQuantWarpWeights];
    for (int i = 0; i < n_w; ++i) {
      sub[i] = outs[i];
      sub[i].y.p = outs[i].y.p + static_cast<int64_t>(first) * outs[i].y.stride;
      sub[i].y.rows = n_tok;
    }
    const CRows xc{x.p + static_cast<int64_t>(first) * x.stride, n_tok, x.cols, x.stride};
    void* sc = static_cast<uint8_t*>(scratch) + chunk_scratch_offset(kk, cols, n_rows, first);
    const cudaError_t e = launch_chunk(k, n_w, sub, cols, w_row_bytes, xc, sc, s, plan, x_ready, total_rows, rl);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

namespace {

cudaError_t launch_chunk(QuantKind k, int n_w, const QuantWarpOut* outs, int64_t cols, int64_t w_row_bytes, CRows x,
                         void* scratch, cudaStream_t s, const QuantWarpPlan* plan, bool x_ready, int64_t total_rows,
                         const QuantRowLayout& rl) {
  const int kk = static_cast<int>(k);
  const int n_tok = static_cast<int>(x.rows), t_launch = padded_tokens(n_tok);
  const QuantWarpPlan p = plan ? *plan : plan_gemv_quant_warp(k, total_rows, cols, n_tok, current_device_sm_count());
  if (!plan_ok(p, t_launch)) return cudaErrorInvalidValue;

  QuantXArgs qa;
  qa.x = x.p;
  qa.x_stride = x.stride;
  qa.cols = cols;
  qa.rows = n_tok;
  qa.s = static_cast<uint8_t*>(scratch);
  qa.nu = x_steps(kk, cols);
  MainArgs a;
  a.n_tok = n_tok;
  a.n_seg = 0;
  int64_t warps = 0;
  for (int i = 0; i < n_w; ++i) {
    if (outs[i].rows == 0) continue;  // nothing to write
    MainSeg& g = a.seg[a.n_seg++];
    g.w = outs[i].w;
    g.rows = outs[i].rows;
    g.y = outs[i].y.p;
    g.y_stride = outs[i].y.stride;
    g.warp_begin = warps;
    warps += (g.rows + p.rows_per_warp - 1) / p.rows_per_warp;
  }
  a.warps = warps;
  a.row_bytes = w_row_bytes;
  a.groups = static_cast<int>(rl.groups);
  a.scale_off = rl.scale_offset;
  a.dm_off = rl.dm_offset;
  a.nu = qa.nu;
  a.s = qa.s;
  switch (k) {
    case QuantKind::kQ4_0: return launch_kind<kQ40>(qa, a, t_launch, p, x_ready, s);
    case QuantKind::kQ8_0: return launch_kind<kQ80>(qa, a, t_launch, p, x_ready, s);
    case QuantKind::kQ4_K: return launch_kind<kQ4K>(qa, a, t_launch, p, x_ready, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_gemv_quant_warp(QuantKind k, const uint8_t* w, int64_t rows, int64_t cols, int64_t w_row_bytes,
                                   CRows x, Rows y, void* scratch, cudaStream_t s, const QuantWarpPlan* plan,
                                   bool x_ready) {
  if (rows <= 0 || x.rows <= 0) return cudaSuccess;
  if (!w || !y.p) return cudaErrorInvalidValue;
  const QuantWarpOut o{w, rows, y};
  return launch_gemv_quant_warp_multi(k, 1, &o, cols, w_row_bytes, x, scratch, s, plan, x_ready);
}

cudaError_t launch_quantize_x_records(QuantKind k, CRows x, void* scratch, cudaStream_t s) {
  const int kk = static_cast<int>(k);
  if (kk < kQ40 || kk > kQ4K || !quant_cols_valid(k, x.cols) || x.cols > (int64_t{1} << 24) || !x.p || !scratch ||
      x.rows < 1 || x.rows > kMaxQuantWarpRecordRows || x.stride < x.cols)
    return cudaErrorInvalidValue;
  QuantXArgs qa;
  qa.x = x.p;
  qa.x_stride = x.stride;
  qa.cols = x.cols;
  qa.s = static_cast<uint8_t*>(scratch);
  qa.nu = x_steps(kk, x.cols);
  const int n = static_cast<int>(x.rows);
  switch (k) {
    case QuantKind::kQ4_0: return launch_quantize<kQ40>(qa, n, false, s);
    case QuantKind::kQ8_0: return launch_quantize<kQ80>(qa, n, false, s);
    case QuantKind::kQ4_K: return launch_quantize<kQ4K>(qa, n, false, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace hs::cuda
