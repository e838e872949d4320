// backend/cuda/elementwise.cu — the CUDA backend's row-wise and element-wise kernels:
// embedding gather, RMSNorm, RoPE, the GLU gates, add / scale / softcap, logit-row gather and
// the f32 -> bf16 conversion that feeds cuBLAS.
//
// Numerics follow backend/cpu/ops.cpp: RMSNorm sums squares in double, RoPE takes cos/sin of
// pos * theta^(-2i/d) in double (at position 1e5 a float angle would be off by ~1e-2 rad),
// the gates use the CPU's overflow-free sigmoid with an accurate expf. Products that the
// CPU rounds separately use __fmul_rn / __fadd_rn so nvcc cannot fuse them into FMAs.
// Cost: all memory-bound, one read and one write of each element (RMSNorm keeps rows of up to
// 16384 float4-aligned floats in registers: one round of loads per row; other rows are read
// twice, the second time from L1/L2); RoPE does one double sincos per (token, pair) shared by
// all heads.
// Shapes are strided rows; a 2-D grid (x over columns, y over rows, both grid-strided)
// covers any size, and contiguous operands are flattened into one long row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/glu.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_x.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/kernels.h"

namespace hs::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridX = 1024;   // column blocks (grid-strided beyond)
constexpr int64_t kMaxGridY = 65535;  // row blocks (grid-strided beyond)

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// The matmul input conversions (f32_to_bf16_kernel / f32_to_f16_kernel's exact arithmetic):
// bf16 round to nearest even; f16 saturating at +-65504, round to nearest even.
__device__ __forceinline__ uint16_t to16(float v, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
              : __half_as_ushort(__float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f)));
}

dim3 grid_for(int64_t rows, int64_t cols) {
  const int64_t gx = std::min<int64_t>(kMaxGridX, (cols + kThreads - 1) / kThreads);
  const int64_t gy = std::min<int64_t>(kMaxGridY, rows);
  return dim3(static_cast<unsigned>(std::max<int64_t>(gx, 1)), static_cast<unsigned>(std::max<int64_t>(gy, 1)), 1);
}

bool empty(int64_t rows, int64_t cols) { return rows <= 0 || cols <= 0; }

// Contiguous operands of the same shape: one row of rows * cols elements.
template <typename A, typename B>
bool flatten2(A& a, B& b) {
  if (a.stride != a.cols || b.stride != b.cols || a.rows != b.rows || a.cols != b.cols) return false;
  a.cols = b.cols = a.rows * a.cols;
  a.stride = b.stride = a.cols;
  a.rows = b.rows = 1;
  return true;
}

#define HS_ROWS_LOOP(rows, cols)                                                           \
  for (int64_t r = blockIdx.y; r < (rows); r += gridDim.y)                                 \
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < (cols); \
         c += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- embedding ---------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ float load_table(const T* p);
template <>
__device__ __forceinline__ float load_table<uint16_t>(const uint16_t* p) { return bf16_bits_to_f32(*p); }
template <>
__device__ __forceinline__ float load_table<float>(const float* p) { return *p; }
template <>
__device__ __forceinline__ float load_table<__half>(const __half* p) { return __half2float(*p); }

template <typename T>
__global__ void embedding_kernel(const T* __restrict__ table, int64_t table_stride, const int32_t* __restrict__ tokens,
                                 Rows out) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  HS_ROWS_LOOP(out.rows, out.cols) {
    const int64_t tok = tokens[r];
    out.p[r * out.stride + c] = load_table<T>(table + tok * table_stride + c);
  }
}

// ---- RMSNorm -----------------------------------------------------------------------------

// One block per row (grid-strided over rows). Pass 1 sums squares in double; the block
// reduction's __syncthreads orders every read of the row before pass 2 writes (out may be x).
__global__ void rms_norm_kernel(CRows x, const float* w, float eps, Rows out) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  __shared__ double partial[32];  // [warps]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
  for (int64_t r = blockIdx.x; r < x.rows; r += gridDim.x) {
    const float* xr = x.p + r * x.stride;
    double ss = 0.0;
    for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {
      const double v = xr[c];
      ss += v * v;
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    double total = 0.0;
    for (int i = 0; i < n_warps; ++i) total += partial[i];
    const float inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(x.cols) + static_cast<double>(eps)));
    float* orow = out.p + r * out.stride;
    if (w) {
      for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) orow[c] = __fmul_rn(__fmul_rn(xr[c], inv), w[c]);
    } else {
      for (int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) orow[c] = __fmul_rn(xr[c], inv);
    }
    __syncthreads();  // `partial` is rewritten by the next row
  }
}

// The same arithmetic for rows of float4s (cols % 4 == 0, every row 16-byte aligned): one
// block per row (grid-strided), thread i holds float4s i, i + blockDim, ... (at most K) of its
// row and of w in registers from one round of loads, so a row is read once and a block's
// latency is one load, a warp butterfly and one barrier. The double partials are summed in a
// fixed order (lanes by butterfly, then warps 0, 1, ...): deterministic for a given cols.
// With add_y (add_rms_norm): x += y first (stored back to x), then the same norm of the sum, so
// the result is bitwise that of add then rms_norm.
template <int K>
__global__ void __launch_bounds__(1024) rms_norm_vec_kernel(CRows x, const float* w, float eps, Rows out,
                                                            CRows add_y = CRows{nullptr, 0, 0, 0},
                                                            Out16 out16 = Out16{}, OutQ outq = OutQ{}) {
  extern __shared__ float qrow[];  // outq: [cols] the row's outputs, for the record writers
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  __shared__ double partial[2][32];  // [row parity][warps]: one barrier per row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int n4 = static_cast<int>(x.cols / 4);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  float4 wv[K];
  if (w) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < n4) wv[k] = __ldg(w4 + i);
    }
  }
  int parity = 0;
  for (int64_t r = blockIdx.x; r < x.rows; r += gridDim.x, parity ^= 1) {
    const float4* xr = reinterpret_cast<const float4*>(x.p + r * x.stride);
    float4 v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < n4) v[k] = xr[i];
    }
    if (add_y.p) {  // the residual add: x += y, written back before the norm reads on
      const float4* yr = reinterpret_cast<const float4*>(add_y.p + r * add_y.stride);
      float4* xw = reinterpret_cast<float4*>(const_cast<float*>(x.p) + r * x.stride);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < n4) {
          const float4 yv = yr[i];
          v[k].x = __fadd_rn(v[k].x, yv.x);
          v[k].y = __fadd_rn(v[k].y, yv.y);
          v[k].z = __fadd_rn(v[k].z, yv.z);
          v[k].w = __fadd_rn(v[k].w, yv.w);
          xw[i] = v[k];
        }
      }
    }
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (threadIdx.x + k * blockDim.x < n4) {
        const double a = v[k].x, b = v[k].y, c = v[k].z, d = v[k].w;
        ss += a * a;
        ss += b * b;
        ss += c * c;
        ss += d * d;
      }
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) partial[parity][warp] = ss;
    __syncthreads();  // also orders every read of the row before the writes (out may be x)
    double total = 0.0;
    for (int i = 0; i < n_warps; ++i) total += partial[parity][i];
    const float inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(x.cols) + static_cast<double>(eps)));
    float4* orow = reinterpret_cast<float4*>(out.p + r * out.stride);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i >= n4) continue;
      float4 o;
      if (w) {
        o.x = __fmul_rn(__fmul_rn(v[k].x, inv), wv[k].x);
        o.y = __fmul_rn(__fmul_rn(v[k].y, inv), wv[k].y);
        o.z = __fmul_rn(__fmul_rn(v[k].z, inv), wv[k].z);
        o.w = __fmul_rn(__fmul_rn(v[k].w, inv), wv[k].w);
      } else {
        o.x = __fmul_rn(v[k].x, inv);
        o.y = __fmul_rn(v[k].y, inv);
        o.z = __fmul_rn(v[k].z, inv);
        o.w = __fmul_rn(v[k].w, inv);
      }
      orow[i] = o;
      if (out16.p) {  // the next matmul's input, [rows][cols] 16-bit
        uint16_t* d = out16.p + r * x.cols + 4 * static_cast<int64_t>(i);
        const uint2 packed = make_uint2(static_cast<uint32_t>(to16(o.x, out16.bf16)) | (static_cast<uint32_t>(to16(o.y, out16.bf16)) << 16),
                                        static_cast<uint32_t>(to16(o.z, out16.bf16)) | (static_cast<uint32_t>(to16(o.w, out16.bf16)) << 16));
        *reinterpret_cast<uint2*>(d) = packed;
      }
      if (outq.s) reinterpret_cast<float4*>(qrow)[i] = o;
    }
    if (outq.s) {  // the quantized GEMV's records of this row: a warp per 32 columns
      __syncthreads();
      const int64_t nb = quant_x::record_blocks(outq.kind, x.cols);
      for (int64_t b = warp; b < nb; b += n_warps) {
        const int64_t c = 32 * b + lane;
        quant_x::store_block_kind(outq.kind, c < x.cols ? qrow[c] : 0.0f, lane, b, static_cast<int>(r),
                                  static_cast<int>(x.rows), outq.s);
      }
      __syncthreads();  // qrow is rewritten by the next row
    }
    // partial[parity] is rewritten two rows later, after every thread passed the next barrier.
  }
}

// ---- RoPE --------------------------------------------------------------------------------

// One block per row (grid-strided); thread t owns pair i = t % half of heads t / half,
// t / half + H', ... (H' = blockDim / half head groups), so the heads rotate in parallel and
// each thread computes its pair's cos/sin once (the head groups repeat that work: it is the
// latency of one double sincos, not a cost per head).
// rope_qk: grid.y = 2, block row y rotates x (y = 0) or x2 (y = 1), the same positions.
__global__ void rope_kernel(Rows x, int head_dim, float theta, bool neox, const int32_t* __restrict__ positions,
                            Rows x2 = Rows{nullptr, 0, 0, 0}) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  if (blockIdx.y == 1) x = x2;
  const int half = head_dim / 2;
  const int64_t n_heads = x.cols / head_dim;
  const int groups = max(1, static_cast<int>(blockDim.x) / half);
  const int i = threadIdx.x % half, hg = threadIdx.x / half;
  if (hg >= groups) return;
  for (int64_t r = blockIdx.x; r < x.rows; r += gridDim.x) {
    const int32_t pos = positions[r];
    float* row = x.p + r * x.stride;
    for (int ii = i; ii < half; ii += static_cast<int>(blockDim.x)) {  // blockDim < half: pairs strided
      const RopeCs cs = rope_cs(pos, ii, head_dim, theta);
      for (int64_t h = hg; h < n_heads; h += groups) {
        float* hr = row + h * head_dim;
        float* pa = hr + rope_off_a(ii, half, neox);
        float* pb = hr + rope_off_b(ii, half, neox);
        const float va = *pa, vb = *pb;
        *pa = rope_a(va, vb, cs);
        *pb = rope_b(va, vb, cs);
      }
    }
  }
}

// ---- gates and element-wise ----------------------------------------------------------------

// out16 (when set): the product also as 16-bit at [r][c] of rows `out16_cols` wide.
__global__ void glu_kernel(int kind, CRows gate, CRows up, Rows out, Out16 out16, int64_t out16_cols) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  HS_ROWS_LOOP(out.rows, out.cols) {
    const float v = glu_value(kind, gate.p[r * gate.stride + c], up.p[r * up.stride + c]);
    out.p[r * out.stride + c] = v;
    if (out16.p) out16.p[r * out16_cols + c] = to16(v, out16.bf16);
  }
}

// grid (record_blocks / 8, rows) CTAs of 8 warps: warp w of CTA (x, r) makes columns
// 32 (8 x + w) .. + 31 of row r (past cols: no output, q = 0 in the records).
__global__ void __launch_bounds__(256) glu_q_kernel(int kind, CRows gate, CRows up, Rows out, OutQ outq) {
  pdl_launch_dependents();  // the next kernel (the quantized GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  const int lane = threadIdx.x & 31;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int64_t r = blockIdx.y, c = 32 * b + lane;
  float v = 0.0f;
  if (c < out.cols) {
    v = glu_value(kind, gate.p[r * gate.stride + c], up.p[r * up.stride + c]);
    out.p[r * out.stride + c] = v;
  }
  quant_x::store_block_kind(outq.kind, v, lane, b, static_cast<int>(r), static_cast<int>(gridDim.y), outq.s);
}

__global__ void add_kernel(Rows x, CRows y) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  HS_ROWS_LOOP(x.rows, x.cols) x.p[r * x.stride + c] += y.p[r * y.stride + c];
}

__global__ void scale_kernel(Rows x, float v) {
  HS_ROWS_LOOP(x.rows, x.cols) x.p[r * x.stride + c] *= v;
}

__global__ void softcap_kernel(Rows x, float cap) {
  HS_ROWS_LOOP(x.rows, x.cols) {
    float* p = x.p + r * x.stride + c;
    *p = cap * tanhf(*p / cap);
  }
}

__global__ void gather_rows_kernel(CRows src, const int32_t* __restrict__ rows, Rows dst) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  HS_ROWS_LOOP(dst.rows, dst.cols) dst.p[r * dst.stride + c] = src.p[static_cast<int64_t>(rows[r]) * src.stride + c];
}

__global__ void f32_to_bf16_kernel(CRows x, uint16_t* __restrict__ out) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  HS_ROWS_LOOP(x.rows, x.cols) out[r * x.cols + c] = __bfloat16_as_ushort(__float2bfloat16_rn(x.p[r * x.stride + c]));
}

// Saturating: a value past the f16 range becomes +-65504 (never inf), so one outlier in an
// activation row cannot turn a GEMM into NaN.
__global__ void f32_to_f16_kernel(CRows x, __half* __restrict__ out) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  HS_ROWS_LOOP(x.rows, x.cols) out[r * x.cols + c] = __float2half_rn(fminf(fmaxf(x.p[r * x.stride + c], -65504.0f), 65504.0f));
}

// x = hi + lo in two 16-bit terms (precise matmuls): hi = to16(x), lo = to16(x - hi) (exact in f32).
__global__ void f32_split16_kernel(CRows x, uint16_t* __restrict__ hi, uint16_t* __restrict__ lo, bool bf16) {
  pdl_wait();
  HS_ROWS_LOOP(x.rows, x.cols) {
    const float v = x.p[r * x.stride + c];
    const uint16_t h = to16(v, bf16);
    const float hv = bf16 ? bf16_bits_to_f32(h) : __half2float(__ushort_as_half(h));
    hi[r * x.cols + c] = h;
    lo[r * x.cols + c] = to16(__fsub_rn(v, hv), bf16);
  }
}

// dst segment i = columns [off_i, off_i + cols_i) of src (segments back to back, up to 3).
struct SplitDst {
  Rows d[3];
  int n = 0;
};
__global__ void split_cols_kernel(CRows src, SplitDst dst) {
  pdl_launch_dependents();  // the next kernel (a PDL GEMV) may start loading its weights
  pdl_wait();               // what the kernel before wrote (a no-op unless launched with PDL)
  HS_ROWS_LOOP(src.rows, src.cols) {
    int i = 0;
    int64_t cc = c;
    while (i + 1 < dst.n && cc >= dst.d[i].cols) cc -= dst.d[i++].cols;
    dst.d[i].p[r * dst.d[i].stride + cc] = src.p[r * src.stride + c];
  }
}

#undef HS_ROWS_LOOP

// Threads for a one-block-per-row kernel over `n` items per row: a warp multiple, <= 256.
unsigned row_threads(int64_t n) {
  const int64_t t = std::min<int64_t>(kThreads, ((std::max<int64_t>(n, 1) + 31) / 32) * 32);
  return static_cast<unsigned>(t);
}
unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, 65535 * 16)); }

}  // namespace

cudaError_t launch_embedding_bf16(const uint16_t* table, int64_t table_stride, const int32_t* tokens, Rows out,
                                  cudaStream_t s) {
  if (empty(out.rows, out.cols)) return cudaSuccess;
  embedding_kernel<uint16_t><<<grid_for(out.rows, out.cols), kThreads, 0, s>>>(table, table_stride, tokens, out);
  return cudaGetLastError();
}

cudaError_t launch_embedding_f16(const uint16_t* table, int64_t table_stride, const int32_t* tokens, Rows out,
                                 cudaStream_t s) {
  if (empty(out.rows, out.cols)) return cudaSuccess;
  embedding_kernel<__half><<<grid_for(out.rows, out.cols), kThreads, 0, s>>>(reinterpret_cast<const __half*>(table),
                                                                              table_stride, tokens, out);
  return cudaGetLastError();
}

cudaError_t launch_embedding_f32(const float* table, int64_t table_stride, const int32_t* tokens, Rows out,
                                 cudaStream_t s) {
  if (empty(out.rows, out.cols)) return cudaSuccess;
  embedding_kernel<float><<<grid_for(out.rows, out.cols), kThreads, 0, s>>>(table, table_stride, tokens, out);
  return cudaGetLastError();
}

namespace {
// rms_norm_vec_kernel's launch (x, out, w, and y when adding, float4 rows) or false when the
// operands do not take it.
bool launch_rms_norm_vec(CRows x, const float* w, float eps, Rows out, CRows add_y, cudaStream_t s,
                         Out16 out16 = Out16{}, OutQ outq = OutQ{}) {
  const auto a16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const int64_t n4 = x.cols / 4;
  if (!(x.cols % 4 == 0 && x.stride % 4 == 0 && out.stride % 4 == 0 && a16(x.p) && a16(out.p) && (!w || a16(w)) &&
        (!add_y.p || (add_y.stride % 4 == 0 && a16(add_y.p))) && n4 <= 4 * 1024))
    return false;
  // With outq a row's record blocks are shared out over the block's warps: the most threads
  // (the block is one row's latency either way; 256 threads left each warp 16 serial blocks).
  const int64_t threads =
      std::min<int64_t>(1024, ((outq.s ? n4 : (n4 + 3) / 4) + 31) / 32 * 32);
  const int64_t k = (n4 + threads - 1) / threads;  // 1..4
  const unsigned t = static_cast<unsigned>(threads);
  if (out16.p && (reinterpret_cast<uintptr_t>(out16.p) & 7) != 0) return false;
  size_t smem = 0;
  if (outq.s) {
    if (x.rows > 2 || x.cols > kMaxOutQCols || outq.kind < quant_x::kQ40 || outq.kind > quant_x::kQ4K ||
        x.cols % (outq.kind == quant_x::kQ4K ? 256 : 32) != 0 || !a16(outq.s))
      return false;
    smem = static_cast<size_t>(x.cols) * 4;
  }
  if (k == 1)
    launch_chain(rms_norm_vec_kernel<1>, row_blocks(x.rows), t, smem, s, x, w, eps, out, add_y, out16, outq);
  else if (k == 2)
    launch_chain(rms_norm_vec_kernel<2>, row_blocks(x.rows), t, smem, s, x, w, eps, out, add_y, out16, outq);
  else
    launch_chain(rms_norm_vec_kernel<4>, row_blocks(x.rows), t, smem, s, x, w, eps, out, add_y, out16, outq);
  return true;
}
}  // namespace

bool launch_rms_norm16(CRows x, const float* w, float eps, Rows out, Out16 out16, cudaStream_t s, OutQ outq) {
  if (empty(x.rows, x.cols)) return false;
  return launch_rms_norm_vec(x, w, eps, out, CRows{nullptr, 0, 0, 0}, s, out16, outq);
}

bool launch_add_rms_norm16(Rows x, CRows y, const float* w, float eps, Rows out, Out16 out16, cudaStream_t s,
                           OutQ outq) {
  if (empty(x.rows, x.cols)) return false;
  return launch_rms_norm_vec(CRows{x.p, x.rows, x.cols, x.stride}, w, eps, out, y, s, out16, outq);
}

cudaError_t launch_add_rms_norm(Rows x, CRows y, const float* w, float eps, Rows out, cudaStream_t s) {
  if (empty(x.rows, x.cols)) return cudaSuccess;
  const CRows xc{x.p, x.rows, x.cols, x.stride};
  if (launch_rms_norm_vec(xc, w, eps, out, y, s)) return cudaGetLastError();
  const cudaError_t e = launch_add(x, y, s);  // unaligned / odd rows: the two kernels
  if (e != cudaSuccess) return e;
  return launch_rms_norm(xc, w, eps, out, s);
}

cudaError_t launch_rms_norm(CRows x, const float* w, float eps, Rows out, cudaStream_t s) {
  if (empty(x.rows, x.cols)) return cudaSuccess;
  if (launch_rms_norm_vec(x, w, eps, out, CRows{nullptr, 0, 0, 0}, s)) return cudaGetLastError();
  launch_chain(rms_norm_kernel, row_blocks(x.rows), row_threads(x.cols), 0, s, x, w, eps, out);
  return cudaGetLastError();
}

cudaError_t launch_rope(Rows x, int head_dim, float theta, bool neox, const int32_t* positions, cudaStream_t s) {
  if (empty(x.rows, x.cols) || head_dim < 2) return cudaSuccess;
  // Threads: whole head groups of head_dim / 2 pairs, up to 1024 (or one group when a head's
  // pairs alone exceed 1024: then pairs are strided).
  const int64_t half = head_dim / 2, heads = x.cols / head_dim;
  const unsigned threads = static_cast<unsigned>(
      half >= 1024 ? 1024 : std::min<int64_t>(heads, 1024 / half) * half);
  launch_chain(rope_kernel, row_blocks(x.rows), threads, 0, s, x, head_dim, theta, neox, positions,
               Rows{nullptr, 0, 0, 0});
  return cudaGetLastError();
}

cudaError_t launch_rope_qk(Rows q, Rows k, int head_dim, float theta, bool neox, const int32_t* positions,
                           cudaStream_t s) {
  if (q.rows != k.rows || empty(k.rows, k.cols)) {  // one of them empty (or unequal): one at a time
    const cudaError_t e = launch_rope(q, head_dim, theta, neox, positions, s);
    return e != cudaSuccess ? e : launch_rope(k, head_dim, theta, neox, positions, s);
  }
  if (empty(q.rows, q.cols) || head_dim < 2) return cudaSuccess;
  const int64_t half = head_dim / 2, heads = std::max(q.cols, k.cols) / head_dim;
  const unsigned threads = static_cast<unsigned>(
      half >= 1024 ? 1024 : std::max<int64_t>(1, std::min<int64_t>(heads, 1024 / half)) * half);
  launch_chain(rope_kernel, dim3(row_blocks(q.rows), 2, 1), threads, 0, s, q, head_dim, theta, neox, positions, k);
  return cudaGetLastError();
}

cudaError_t launch_glu(int kind, CRows gate, CRows up, Rows out, cudaStream_t s, Out16 out16) {
  if (empty(out.rows, out.cols)) return cudaSuccess;
  const int64_t out16_cols = out.cols;  // before flattening: the 16-bit copy is [rows][cols]
  if (gate.stride == gate.cols && up.stride == up.cols && out.stride == out.cols) {
    const int64_t n = out.rows * out.cols;
    gate = CRows{gate.p, 1, n, n};
    up = CRows{up.p, 1, n, n};
    out = Rows{out.p, 1, n, n};
  }
  launch_chain(glu_kernel, grid_for(out.rows, out.cols), kThreads, 0, s, kind, gate, up, out, out16,
                                                                out.rows == 1 ? out.cols : out16_cols);
  return cudaGetLastError();
}

cudaError_t launch_glu_q(int kind, CRows gate, CRows up, Rows out, OutQ outq, cudaStream_t s) {
  if (empty(out.rows, out.cols)) return cudaSuccess;
  if (!outq.s || out.rows > 2 || outq.kind < quant_x::kQ40 || outq.kind > quant_x::kQ4K ||
      out.cols % (outq.kind == quant_x::kQ4K ? 256 : 32) != 0 || (reinterpret_cast<uintptr_t>(outq.s) & 15) != 0)
    return cudaErrorInvalidValue;
  const int64_t ctas = quant_x::record_blocks(outq.kind, out.cols) / 8;
  launch_chain(glu_q_kernel, dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(out.rows), 1), 256, 0, s, kind,
               gate, up, out, outq);
  return cudaGetLastError();
}

cudaError_t launch_add(Rows x, CRows y, cudaStream_t s) {
  if (empty(x.rows, x.cols)) return cudaSuccess;
  flatten2(x, y);
  launch_chain(add_kernel, grid_for(x.rows, x.cols), kThreads, 0, s, x, y);
  return cudaGetLastError();
}

cudaError_t launch_split_cols(CRows src, int n_dst, const Rows* dst, cudaStream_t s) {
  if (n_dst < 1 || n_dst > 3) return cudaErrorInvalidValue;
  SplitDst d;
  int64_t cols = 0;
  for (int i = 0; i < n_dst; ++i) {
    if (dst[i].rows != src.rows) return cudaErrorInvalidValue;
    d.d[i] = dst[i];
    cols += dst[i].cols;
  }
  d.n = n_dst;
  if (cols != src.cols) return cudaErrorInvalidValue;
  if (empty(src.rows, src.cols)) return cudaSuccess;
  launch_chain(split_cols_kernel, grid_for(src.rows, src.cols), kThreads, 0, s, src, d);
  return cudaGetLastError();
}

cudaError_t launch_scale(Rows x, float v, cudaStream_t s) {
  if (empty(x.rows, x.cols)) return cudaSuccess;
  if (x.stride == x.cols) x = Rows{x.p, 1, x.rows * x.cols, x.rows * x.cols};
  launch_chain(scale_kernel, grid_for(x.rows, x.cols), kThreads, 0, s, x, v);
  return cudaGetLastError();
}

cudaError_t launch_softcap(Rows x, float cap, cudaStream_t s) {
  if (empty(x.rows, x.cols)) return cudaSuccess;
  if (x.stride == x.cols) x = Rows{x.p, 1, x.rows * x.cols, x.rows * x.cols};
  launch_chain(softcap_kernel, grid_for(x.rows, x.cols), kThreads, 0, s, x, cap);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(CRows src, const int32_t* rows, Rows dst, cudaStream_t s) {
  if (empty(dst.rows, dst.cols)) return cudaSuccess;
  launch_chain(gather_rows_kernel, grid_for(dst.rows, dst.cols), kThreads, 0, s, src, rows, dst);
  return cudaGetLastError();
}

cudaError_t launch_f32_to_bf16(CRows x, uint16_t* out, cudaStream_t s) {
  if (empty(x.rows, x.cols)) return cudaSuccess;
  if (x.stride == x.cols) x = CRows{x.p, 1, x.rows * x.cols, x.rows * x.cols};
  launch_chain(f32_to_bf16_kernel, grid_for(x.rows, x.cols), kThreads, 0, s, x, out);
  return cudaGetLastError();
}

cudaError_t launch_f32_split16(CRows x, uint16_t* hi, uint16_t* lo, bool bf16, cudaStream_t s) {
  if (empty(x.rows, x.cols)) return cudaSuccess;
  f32_split16_kernel<<<grid_for(x.rows, x.cols), kThreads, 0, s>>>(x, hi, lo, bf16);
  return cudaGetLastError();
}

cudaError_t launch_f32_to_f16(CRows x, uint16_t* out, cudaStream_t s) {
  if (empty(x.rows, x.cols)) return cudaSuccess;
  if (x.stride == x.cols) x = CRows{x.p, 1, x.rows * x.cols, x.rows * x.cols};
  launch_chain(f32_to_f16_kernel, grid_for(x.rows, x.cols), kThreads, 0, s, x, reinterpret_cast<__half*>(out));
  return cudaGetLastError();
}

namespace {
__global__ void fill_random_bf16_kernel(uint16_t* out, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(u));
  }
}
}  // namespace

cudaError_t launch_fill_random_bf16(uint16_t* out, int64_t n, uint64_t seed, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  fill_random_bf16_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(out, n, seed);
  return cudaGetLastError();
}

}  // namespace hs::cuda
