// backend/cuda/gemv_warp.cu — the batch-1/2 GEMV of 16-bit weights: one warp per weight row,
// CUDA-core FMAs, f32 activations (launch_gemv16_warp in gemv_kernels.h).
//
// Decode at batch 1 is a pure weight stream (16 GB per token for the 8B shape), so the kernel
// is built for bytes in flight, not arithmetic: each lane issues 4 (or 8 for long rows)
// independent 16-byte streaming loads (ld.global.nc.L1::no_allocate) of its row before using
// any, 8 warps per CTA, a CTA per 8 rows; x (f32, 16-64 KiB a token) comes through L1 with
// __ldg float4 loads, read by every warp of the SM (L1-resident). Each weight is widened exactly
// to f32 and multiplied by the f32 x in an FMA: the only rounding is fp32 accumulation (per
// lane in column order, then a butterfly over the 32 lanes) — tighter than the tensor-core
// kernel of gemv.cu, which serves 3..8 rows. Cost: one pass over the weights; x is read
// rows / 8 times from L1/L2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv_kernels.h"

namespace hs::cuda {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Two 16-bit weights packed in a word -> two floats (exact).
template <bool BF16>
__device__ __forceinline__ float2 widen2(uint32_t w) {
  if constexpr (BF16) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
  }
}

// acc[t] += 8 weights (one uint4) . x[t][c0 .. c0 + 8)
template <bool BF16, int NT>
__device__ __forceinline__ void dot8(const uint4& wv, const float* __restrict__ x, int64_t x_stride, int64_t c0,
                                     float (&acc)[NT]) {
  const float2 w0 = widen2<BF16>(wv.x), w1 = widen2<BF16>(wv.y), w2 = widen2<BF16>(wv.z), w3 = widen2<BF16>(wv.w);
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float4 xa = __ldg(reinterpret_cast<const float4*>(x + t * x_stride + c0));
    const float4 xb = __ldg(reinterpret_cast<const float4*>(x + t * x_stride + c0 + 4));
    float a = acc[t];
    a = fmaf(w0.x, xa.x, a);
    a = fmaf(w0.y, xa.y, a);
    a = fmaf(w1.x, xa.z, a);
    a = fmaf(w1.y, xa.w, a);
    a = fmaf(w2.x, xb.x, a);
    a = fmaf(w2.y, xb.y, a);
    a = fmaf(w3.x, xb.z, a);
    a = fmaf(w3.y, xb.w, a);
    acc[t] = a;
  }
}

// grid: ceil(rows / kWarps) CTAs of kWarps warps; warp w of CTA b computes row b * kWarps + w.
template <bool BF16, int NT, int UNROLL>
__global__ void __launch_bounds__(32 * kWarps) gemv16_warp_kernel(const uint16_t* __restrict__ w, int64_t rows,
                                                                  int64_t cols, int64_t w_stride, CRows x, Rows y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (r >= rows) return;
  const uint4* wr = reinterpret_cast<const uint4*>(w + r * w_stride);  // [cols / 8] chunks
  const int64_t chunks = cols / 8;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  int64_t c = lane;
  for (; c + 32 * (UNROLL - 1) < chunks; c += 32 * UNROLL) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = load_stream(wr + c + 32 * u);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) dot8<BF16, NT>(v[u], x.p, x.stride, (c + 32 * u) * 8, acc);
  }
  for (; c < chunks; c += 32) dot8<BF16, NT>(load_stream(wr + c), x.p, x.stride, c * 8, acc);
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float a = acc[t];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
    if (lane == 0) y.p[t * y.stride + r] = a;
  }
}

template <bool BF16, int NT>
cudaError_t launch_nt(const uint16_t* w, int64_t rows, int64_t cols, int64_t stride, CRows x, Rows y, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  if (cols >= 8192)
    gemv16_warp_kernel<BF16, NT, 8><<<blocks, 32 * kWarps, 0, s>>>(w, rows, cols, stride, x, y);
  else
    gemv16_warp_kernel<BF16, NT, 4><<<blocks, 32 * kWarps, 0, s>>>(w, rows, cols, stride, x, y);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_gemv16_warp(bool bf16, const uint16_t* w, int64_t rows, int64_t cols, int64_t w_stride_elems,
                               CRows x, Rows y, cudaStream_t s) {
  if (rows <= 0 || x.rows <= 0) return cudaSuccess;
  if (x.rows > kMaxGemvWarpRows || cols % 8 != 0 || w_stride_elems % 8 != 0 || x.cols != cols || y.cols != rows ||
      y.rows != x.rows || x.stride % 4 != 0 || (reinterpret_cast<uintptr_t>(x.p) & 15) != 0 ||
      (reinterpret_cast<uintptr_t>(w) & 15) != 0 || rows > (int64_t{1} << 31) * kWarps)
    return cudaErrorInvalidValue;
  if (bf16)
    return x.rows == 1 ? launch_nt<true, 1>(w, rows, cols, w_stride_elems, x, y, s)
                       : launch_nt<true, 2>(w, rows, cols, w_stride_elems, x, y, s);
  return x.rows == 1 ? launch_nt<false, 1>(w, rows, cols, w_stride_elems, x, y, s)
                     : launch_nt<false, 2>(w, rows, cols, w_stride_elems, x, y, s);
}

}  // namespace hs::cuda
