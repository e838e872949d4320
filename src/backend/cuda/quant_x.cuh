// backend/cuda/quant_x.cuh — the int16 x records of the batch-1/2 quantized GEMV
// (gemv_quant_warp.cu: its header comment gives the record layout and the quantization rule).
//
// Owns the one device routine that turns 32 columns of one token into their record bytes
// (quant_x_store_block), shared by the GEMV's own quantize kernel and by the ops that write the
// records beside their f32 output for the GEMV after them (rms_norm / add_rms_norm / glu,
// elementwise.cu), so both give the same bytes and the GEMV the same bits. Cost: one warp
// instruction group per 32 columns (a max and a sum butterfly, one rounding per element).
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

namespace hs::cuda::quant_x {

constexpr int kQ40 = 0, kQ80 = 1, kQ4K = 2;  // QuantKind's values (quant_layout.h)
constexpr uint32_t kMagicBits = 0x4B400000u;  // the float 1.5 * 2^23
constexpr float kMagic = 12582912.0f;

// One token's record of one u-step of x scratch (bytes) and where its pieces start.
struct XRec {
  int c = 0, d = 0, s = 0;  // offsets of C (Q4_0), D, S (Q4_K); X is at 0
  int bytes = 0;
};
__host__ __device__ constexpr XRec xrec(int k) {
  XRec z;
  if (k == kQ40) {
    z.c = 2048, z.d = 2560, z.bytes = 2816;
  } else if (k == kQ4K) {
    z.d = 2048, z.s = 2304, z.bytes = 2432;
  } else {
    z.d = 1024, z.bytes = 1088;
  }
  return z;
}
// 32-column blocks per group of one u-step lane quad (Q4: 4, Q8: 2); a u-step is 8 groups.
__host__ __device__ constexpr int blocks_per_group(int k) { return k == kQ80 ? 2 : 4; }
// u-steps of x rows of `cols` columns (quant_layout.h's groups of 128 / 64 / 128 columns, 8 a
// u-step), and the 32-column blocks they hold (past cols: zero padding, written as q = 0).
__host__ __device__ constexpr int64_t u_steps(int k, int64_t cols) {
  const int64_t gc = k == kQ80 ? 64 : 128;
  return ((cols + gc - 1) / gc + 7) / 8;
}
__host__ __device__ constexpr int64_t record_blocks(int k, int64_t cols) { return u_steps(k, cols) * 8 * blocks_per_group(k); }

// Block b (columns 32 b .. 32 b + 31) of token tok of n_tok: lane L of the calling warp holds
// column 32 b + L's value v (0 past the row's end); writes its part of the record in `s`
// ([nu][n_tok][xrec(K).bytes]). All 32 lanes must call it together.
template <int K>
__device__ __forceinline__ void store_block(float v, int lane, int64_t b, int tok, int n_tok, uint8_t* s) {
  constexpr int B = blocks_per_group(K);
  constexpr XRec Z = xrec(K);
  const bool bad = __any_sync(0xffffffffu, !(fabsf(v) <= FLT_MAX));
  float amax = fabsf(v);
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  amax = fmaxf(amax, 0x1p-100f);
  float dx = __fdiv_rn(amax, 32767.0f);
  dx = __uint_as_float((__float_as_uint(dx) + 3u) & ~3u);  // 22-bit mantissa: 1.5 * 2^23 * dx exact
  const float inv = __fdiv_rn(1.0f, dx);
  int q = __float2int_rn(v * inv);
  q = min(32767, max(-32767, q));
  if (bad) {
    q = 0;
    dx = __int_as_float(0x7fc00000);  // NaN
  }
  const int64_t g = b / B;
  const int j = static_cast<int>(b % B);
  const int64_t u = g >> 3;
  const int qd = static_cast<int>(g & 7);
  const int t = (lane >> 2) & 3, slot = ((lane >> 4) << 2) | (lane & 3);  // lane's column in E(t)
  const int L = 4 * qd + t;
  uint8_t* rec = s + (u * n_tok + tok) * Z.bytes;
  *reinterpret_cast<int16_t*>(rec + (j * 32 + L) * 16 + 2 * slot) = static_cast<int16_t>(q);
  if constexpr (K == kQ40) {
    int ps = q;  // sum over E(t): lanes differing in bits 0, 1, 4
    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
    ps += __shfl_xor_sync(0xffffffffu, ps, 2);
    ps += __shfl_xor_sync(0xffffffffu, ps, 16);
    if ((lane & 0x13) == 0) *reinterpret_cast<int*>(rec + Z.c + L * 16 + 4 * j) = static_cast<int>(kMagicBits) - 8 * ps;
  }
  if constexpr (K == kQ4K) {
    int bs = q;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) bs += __shfl_xor_sync(0xffffffffu, bs, m);
    if (lane == 0) *reinterpret_cast<float*>(rec + Z.s + qd * 16 + 4 * j) = static_cast<float>(bs) * dx;
  }
  if (lane == 0) {
    if constexpr (K == kQ80) {
      *reinterpret_cast<float*>(rec + Z.d + qd * 8 + 4 * j) = dx;
    } else {
      float* d = reinterpret_cast<float*>(rec + Z.d + qd * 16);
      d[j] = dx;
      d[32 + j] = -kMagic * dx;  // the mdx half, 128 bytes on
    }
  }
}

// store_block for a runtime kind (0..2 as QuantKind).
__device__ __forceinline__ void store_block_kind(int kind, float v, int lane, int64_t b, int tok, int n_tok,
                                                 uint8_t* s) {
  if (kind == kQ40)
    store_block<kQ40>(v, lane, b, tok, n_tok, s);
  else if (kind == kQ80)
    store_block<kQ80>(v, lane, b, tok, n_tok, s);
  else
    store_block<kQ4K>(v, lane, b, tok, n_tok, s);
}

}  // namespace hs::cuda::quant_x
