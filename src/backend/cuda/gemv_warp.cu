// backend/cuda/gemv_warp.cu — the batch-1/2 GEMV of 16-bit weights: whole weight rows per warp,
// CUDA-core FMAs, f32 activations, up to 3 weights sharing x in one launch
// (launch_gemv16_warp / launch_gemv16_warp_multi in gemv_kernels.h).
//
// Decode at batch 1 is a pure weight stream (16 GB per token for the 8B shape), so the kernel
// is built for bytes in flight from the first cycle to the last, not arithmetic:
//   - a persistent grid, one CTA of 16 warps per SM (<= 128 registers a thread: the whole
//     register file); the rows of all weights form one flat list of tasks (1 or 2 rows each)
//     dealt round-robin over the warps, spread over the SMs first (task t -> CTA t % grid, warp
//     (t % (16 grid)) / grid), so a partial last round still loads every SM alike;
//   - each warp streams its tasks as one sequence of steps (8 x 16-byte streaming loads per
//     lane, ld.global.nc.L1::no_allocate with an L2 evict-first policy), two steps ahead of the
//     arithmetic: 8 KB in flight per warp, 128 KB per SM, also across task boundaries (no bubble
//     between rows); the first two steps are issued before x is even read (and, under PDL,
//     before the previous kernel has finished);
//   - x (f32) is staged once per CTA in shared memory, permuted so that a lane's two float4 of
//     a 16-byte chunk are conflict-free (per 32-chunk group: first halves, then second halves),
//     and read once for both rows of a 2-row task; x larger than the opt-in shared memory comes
//     through L1 (__ldg).
// Numerics: each weight is widened exactly to f32 and multiplied by the f32 x in an FMA; lane l
// accumulates chunks l, l + 32, ... in column order, then a butterfly over the 32 lanes. That
// order does not depend on the grid, the rows per task, the x path or the other weights of a
// multi launch: every choice gives the same bits (those of the earlier warp-per-row kernel).
// Cost: one pass over the weights; x is read once per CTA from L2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/pdl.cuh"

namespace hs::cuda {
namespace {

constexpr int kWarps = 16;  // per CTA; one CTA per SM
constexpr int kThreads = 32 * kWarps;
constexpr int kLoadsPerStep = 8;  // 16-byte loads per lane and step (rows per task x chunks per row)
constexpr int kGroupFloats = 256;  // 32 chunks of 8 columns: the unit of the shared x layout

// The kernel's arguments, by value (graph-capturable). Entries past n have no tasks.
struct MultiArgs {
  const uint16_t* w[kMaxGemvWarpWeights];
  int64_t w_stride[kMaxGemvWarpWeights];  // elements
  int64_t rows[kMaxGemvWarpWeights];
  float* y[kMaxGemvWarpWeights];
  int64_t y_stride[kMaxGemvWarpWeights];   // floats
  int task_begin[kMaxGemvWarpWeights + 1];  // weight i owns tasks [task_begin[i], task_begin[i + 1])
  const float* x;
  int64_t x_stride;   // floats
  int chunks;         // cols / 8
  int x_pad;          // floats per token row of the shared x (a multiple of kGroupFloats)
};

template <typename T>
__device__ __forceinline__ T pick(const T (&a)[kMaxGemvWarpWeights], int i) {
  static_assert(kMaxGemvWarpWeights == 3, "pick() selects among 3");
  return i == 0 ? a[0] : i == 1 ? a[1] : a[2];
}

__device__ __forceinline__ int weight_of(const MultiArgs& a, int t) {
  return (t >= a.task_begin[1]) + (t >= a.task_begin[2]);
}

// An L2 policy for the weight stream: evict first (each byte is read once per token; activations,
// the KV cache and the next x keep their L2 lines).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// v = *p when pred (16-byte streaming load, no L1 allocation, L2 policy pol); v unchanged otherwise.
__device__ __forceinline__ void load_stream(uint4& v, const uint4* p, bool pred, uint64_t pol) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\t"
      "@p ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %6;\n\t}"
      : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)), "l"(pol));
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

// a += 8 weights (one uint4) . (xa, xb) in column order.
template <bool BF16>
__device__ __forceinline__ float dot8(const uint4& wv, const float4& xa, const float4& xb, float a) {
  const float2 w0 = widen2<BF16>(wv.x), w1 = widen2<BF16>(wv.y), w2 = widen2<BF16>(wv.z), w3 = widen2<BF16>(wv.w);
  a = fmaf(w0.x, xa.x, a);
  a = fmaf(w0.y, xa.y, a);
  a = fmaf(w1.x, xa.z, a);
  a = fmaf(w1.y, xa.w, a);
  a = fmaf(w2.x, xb.x, a);
  a = fmaf(w2.y, xb.y, a);
  a = fmaf(w3.x, xb.z, a);
  a = fmaf(w3.y, xb.w, a);
  return a;
}

// Task t -> its weight i, the weight's first row of the task and that weight's rows.
template <int RPW>
struct TaskRef {
  int i;
  int64_t r0;
};
template <int RPW>
__device__ __forceinline__ TaskRef<RPW> task_ref(const MultiArgs& a, int t) {
  const int i = weight_of(a, t);
  const int begin = i == 0 ? a.task_begin[0] : i == 1 ? a.task_begin[1] : a.task_begin[2];
  return TaskRef<RPW>{i, static_cast<int64_t>(t - begin) * RPW};
}

// One step of loads: RPW rows x U chunks (lane + 32 u of the step's 32 U chunks), predicated on
// the row's length. A task past the last row of its weight re-reads that row (never stored).
template <int RPW, int U>
__device__ __forceinline__ void load_step(const MultiArgs& a, int total, int S, int lane, uint64_t pol, int& lt,
                                          int& ls, const uint4* (&lrow)[RPW], uint4 (&buf)[RPW][U]) {
  if (lt >= total) return;  // warp-uniform
  const int base = ls * 32 * U + lane;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = base + 32 * u;
#pragma unroll
    for (int rr = 0; rr < RPW; ++rr) load_stream(buf[rr][u], lrow[rr] + c, c < a.chunks, pol);
  }
  if (++ls == S) {
    ls = 0;
    lt += static_cast<int>(gridDim.x) * kWarps;
    if (lt < total) {
      const TaskRef<RPW> tr = task_ref<RPW>(a, lt);
      const int64_t rows = pick(a.rows, tr.i), stride = pick(a.w_stride, tr.i);
      const uint16_t* w = pick(a.w, tr.i);
#pragma unroll
      for (int rr = 0; rr < RPW; ++rr)
        lrow[rr] = reinterpret_cast<const uint4*>(w + min(tr.r0 + rr, rows - 1) * stride);
    }
  }
}

// acc += the chunks of one step (those load_step loaded into buf). GUARD: the step runs past the
// row's end (chunks at or beyond a.chunks are skipped; full steps go without the tests).
template <bool BF16, int NT, int RPW, int U, bool XS, bool GUARD>
__device__ __forceinline__ void step_dots(const MultiArgs& a, const float* xs, int cs, int lane,
                                          const uint4 (&buf)[RPW][U], float (&acc)[RPW][NT]) {
  const int base = cs * 32 * U + lane;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = base + 32 * u;
    if (GUARD && c >= a.chunks) continue;
    float4 xa[NT], xb[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if constexpr (XS) {
        const float* p = xs + t * a.x_pad + (cs * U + u) * kGroupFloats + 4 * lane;
        xa[t] = *reinterpret_cast<const float4*>(p);
        xb[t] = *reinterpret_cast<const float4*>(p + kGroupFloats / 2);
      } else {
        const float* p = a.x + t * a.x_stride + static_cast<int64_t>(c) * 8;
        xa[t] = __ldg(reinterpret_cast<const float4*>(p));
        xb[t] = __ldg(reinterpret_cast<const float4*>(p + 4));
      }
    }
#pragma unroll
    for (int rr = 0; rr < RPW; ++rr)
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[rr][t] = dot8<BF16>(buf[rr][u], xa[t], xb[t], acc[rr][t]);
  }
}

// The arithmetic of one step, then, after a task's last step, the lane butterfly and the stores
// of its RPW x NT outputs.
template <bool BF16, int NT, int RPW, int U, bool XS>
__device__ __forceinline__ void compute_step(const MultiArgs& a, const float* xs, int total, int S, int lane,
                                             int& ct, int& cs, const uint4 (&buf)[RPW][U], float (&acc)[RPW][NT]) {
  if ((cs + 1) * 32 * U <= a.chunks)  // warp-uniform
    step_dots<BF16, NT, RPW, U, XS, false>(a, xs, cs, lane, buf, acc);
  else
    step_dots<BF16, NT, RPW, U, XS, true>(a, xs, cs, lane, buf, acc);
  if (++cs < S) return;
  // The task's last step: sum over the lanes (every lane ends with the same bits), store, reset.
  float v = 0.0f;
#pragma unroll
  for (int rr = 0; rr < RPW; ++rr)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float s = acc[rr][t];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (lane == rr * NT + t) v = s;
      acc[rr][t] = 0.0f;
    }
  const TaskRef<RPW> tr = task_ref<RPW>(a, ct);
  if (lane < RPW * NT) {
    const int rr = lane / NT, t = lane % NT;
    const int64_t r = tr.r0 + rr;
    if (r < pick(a.rows, tr.i)) pick(a.y, tr.i)[t * pick(a.y_stride, tr.i) + r] = v;
  }
  cs = 0;
  ct += static_cast<int>(gridDim.x) * kWarps;
}

// grid: persistent CTAs of kWarps warps. Warp w of CTA b takes tasks w * grid + b + k * (grid * kWarps).
// Dynamic shared memory (XS): NT x x_pad floats, each 32-chunk group of a token row stored as
// the 32 first halves (4 floats) of its chunks, then the 32 second halves.
template <bool BF16, int NT, int RPW, bool XS>
__global__ void __launch_bounds__(kThreads, 1) gemv16_warp_kernel(const MultiArgs a) {
  constexpr int U = kLoadsPerStep / RPW;
  extern __shared__ float4 xs4[];
  pdl_launch_dependents();  // a PDL successor may be scheduled now; it waits for our completion itself
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int total = a.task_begin[kMaxGemvWarpWeights];
  const int S = (a.chunks + 32 * U - 1) / (32 * U);  // steps per task
  const int t0 = warp * static_cast<int>(gridDim.x) + static_cast<int>(blockIdx.x);
  const uint64_t pol = evict_first_policy();

  // The first two steps go out before anything else (they need only the weights).
  uint4 bufA[RPW][U], bufB[RPW][U];
  const uint4* lrow[RPW];
  int lt = t0, ls = 0;
  if (lt < total) {
    const TaskRef<RPW> tr = task_ref<RPW>(a, lt);
    const int64_t rows = pick(a.rows, tr.i), stride = pick(a.w_stride, tr.i);
    const uint16_t* w = pick(a.w, tr.i);
#pragma unroll
    for (int rr = 0; rr < RPW; ++rr) lrow[rr] = reinterpret_cast<const uint4*>(w + min(tr.r0 + rr, rows - 1) * stride);
  }
#pragma unroll
  for (int rr = 0; rr < RPW; ++rr)
#pragma unroll
    for (int u = 0; u < U; ++u) bufA[rr][u] = bufB[rr][u] = make_uint4(0, 0, 0, 0);
  load_step<RPW, U>(a, total, S, lane, pol, lt, ls, lrow, bufA);
  load_step<RPW, U>(a, total, S, lane, pol, lt, ls, lrow, bufB);

  pdl_wait();  // x is the previous kernel's output; y may still be read by it

  const float* xs = reinterpret_cast<const float*>(xs4);
  if constexpr (XS) {
    float4* dst = xs4;
    const int nq = a.chunks * 2;  // float4 per token row
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float4* src = reinterpret_cast<const float4*>(a.x + t * a.x_stride);
      for (int q0 = threadIdx.x; q0 < nq; q0 += 8 * kThreads) {
        float4 v[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
          if (q0 + k * kThreads < nq) v[k] = __ldg(src + q0 + k * kThreads);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int q = q0 + k * kThreads;  // chunk q / 2, half q % 2
          if (q < nq) dst[t * (a.x_pad / 4) + (q >> 6) * (kGroupFloats / 4) + (q & 1) * 32 + ((q >> 1) & 31)] = v[k];
        }
      }
    }
    __syncthreads();
  }
  if (t0 >= total) return;

  float acc[RPW][NT];
#pragma unroll
  for (int rr = 0; rr < RPW; ++rr)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[rr][t] = 0.0f;
  int ct = t0, cs = 0;
  for (;;) {
    compute_step<BF16, NT, RPW, U, XS>(a, xs, total, S, lane, ct, cs, bufA, acc);
    load_step<RPW, U>(a, total, S, lane, pol, lt, ls, lrow, bufA);
    if (ct >= total) break;
    compute_step<BF16, NT, RPW, U, XS>(a, xs, total, S, lane, ct, cs, bufB, acc);
    load_step<RPW, U>(a, total, S, lane, pol, lt, ls, lrow, bufB);
    if (ct >= total) break;
  }
}

// ---- host side ---------------------------------------------------------------------------------

constexpr int kMaxDevices = 64;

struct DeviceInfo {
  int dev = -1;
  int n_sm = 0;
  int smem_optin = 0;  // bytes of dynamic shared memory a CTA may opt into
};

// The current device's, queried once per device (two threads may both query: same values).
DeviceInfo device_info() {
  static std::atomic<int> n_sm[kMaxDevices], smem[kMaxDevices];
  DeviceInfo d;
  if (cudaGetDevice(&d.dev) != cudaSuccess || d.dev < 0 || d.dev >= kMaxDevices) return DeviceInfo{};
  d.n_sm = n_sm[d.dev].load(std::memory_order_acquire);
  d.smem_optin = smem[d.dev].load(std::memory_order_relaxed);
  if (d.n_sm <= 0) {
    if (cudaDeviceGetAttribute(&d.n_sm, cudaDevAttrMultiProcessorCount, d.dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d.dev) != cudaSuccess)
      return DeviceInfo{};
    smem[d.dev].store(d.smem_optin, std::memory_order_relaxed);
    n_sm[d.dev].store(d.n_sm, std::memory_order_release);
  }
  return d;
}

template <bool BF16, int NT, int RPW, bool XS>
cudaError_t launch_warp_kernel(const MultiArgs& a, unsigned grid, size_t smem, bool pdl, const DeviceInfo& dev,
                          cudaStream_t s) {
  auto* kernel = gemv16_warp_kernel<BF16, NT, RPW, XS>;
  if (smem > 48 * 1024) {  // opt in once per kernel and device, to the device's limit
    static std::atomic<bool> opted[kMaxDevices];
    if (!opted[dev.dev].load(std::memory_order_acquire)) {
      const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dev.smem_optin);
      if (e != cudaSuccess) return e;
      opted[dev.dev].store(true, std::memory_order_release);
    }
  }
  return launch_kernel(kernel, dim3(grid), dim3(kThreads), smem, pdl, s, a);
}

template <bool BF16, int NT>
cudaError_t launch_nt(const MultiArgs& a, int rpw, bool xs, unsigned grid, size_t smem, bool pdl,
                      const DeviceInfo& dev, cudaStream_t s) {
  if (rpw == 2)
    return xs ? launch_warp_kernel<BF16, NT, 2, true>(a, grid, smem, pdl, dev, s)
              : launch_warp_kernel<BF16, NT, 2, false>(a, grid, smem, pdl, dev, s);
  return xs ? launch_warp_kernel<BF16, NT, 1, true>(a, grid, smem, pdl, dev, s)
            : launch_warp_kernel<BF16, NT, 1, false>(a, grid, smem, pdl, dev, s);
}

}  // namespace

cudaError_t launch_gemv16_warp_multi(bool bf16, int n_weights, const uint16_t* const* w, const int64_t* rows,
                                     int64_t cols, const int64_t* w_stride_elems, CRows x, const Rows* y,
                                     cudaStream_t s, const GemvWarpConfig* cfg) {
  if (n_weights < 1 || n_weights > kMaxGemvWarpWeights || !w || !rows || !w_stride_elems || !y)
    return cudaErrorInvalidValue;
  if (x.rows <= 0) return cudaSuccess;
  if (x.rows > kMaxGemvWarpRows || cols <= 0 || cols % 8 != 0 || cols > (int64_t{1} << 30) || x.cols != cols ||
      x.stride % 4 != 0 || (reinterpret_cast<uintptr_t>(x.p) & 15) != 0)
    return cudaErrorInvalidValue;
  int64_t all_rows = 0;
  for (int i = 0; i < n_weights; ++i) {
    if (rows[i] < 0 || w_stride_elems[i] % 8 != 0 || (reinterpret_cast<uintptr_t>(w[i]) & 15) != 0 ||
        y[i].cols != rows[i] || y[i].rows != x.rows)
      return cudaErrorInvalidValue;
    all_rows += rows[i];
  }
  if (all_rows == 0) return cudaSuccess;
  if (all_rows > (int64_t{1} << 30)) return cudaErrorInvalidValue;  // int task indices with room for a round
  const DeviceInfo dev = device_info();
  if (dev.n_sm <= 0) return cudaErrorInvalidDevice;
  const int nt = static_cast<int>(x.rows);
  const int64_t grid_max = cfg && cfg->ctas > 0 ? std::min(cfg->ctas, 1 << 16) : dev.n_sm;
  const int64_t slots = grid_max * kWarps;

  // Rows per task: the busiest warp's rows, ceil(tasks / slots) * rpw, decide; 2 rows (x read
  // once for both) unless 1 saves more than 5 % of that.
  auto tasks_of = [&](int rpw) {
    int64_t t = 0;
    for (int i = 0; i < n_weights; ++i) t += (rows[i] + rpw - 1) / rpw;
    return t;
  };
  int rpw = cfg && (cfg->rows_per_warp == 1 || cfg->rows_per_warp == 2) ? cfg->rows_per_warp : 0;
  if (rpw == 0) {
    const int64_t busy2 = (tasks_of(2) + slots - 1) / slots * 2, busy1 = (tasks_of(1) + slots - 1) / slots;
    rpw = static_cast<double>(busy1) < 0.95 * static_cast<double>(busy2) ? 1 : 2;
  }

  const int chunks = static_cast<int>(cols / 8);
  const int groups = (chunks + 31) / 32;
  const size_t smem = static_cast<size_t>(nt) * groups * kGroupFloats * sizeof(float);
  const bool fits = smem <= static_cast<size_t>(dev.smem_optin);
  bool xs = fits;
  if (cfg && cfg->x_smem == 0) xs = false;
  if (cfg && cfg->x_smem == 1) {
    if (!fits) return cudaErrorInvalidValue;
    xs = true;
  }

  MultiArgs a = {};
  int64_t begin = 0;
  for (int i = 0; i < kMaxGemvWarpWeights; ++i) {
    a.task_begin[i] = static_cast<int>(begin);
    if (i < n_weights) {
      a.w[i] = w[i];
      a.w_stride[i] = w_stride_elems[i];
      a.rows[i] = rows[i];
      a.y[i] = y[i].p;
      a.y_stride[i] = y[i].stride;
      begin += (rows[i] + rpw - 1) / rpw;
    } else {
      a.w[i] = w[0];
      a.rows[i] = 1;  // never indexed: no tasks
      a.y[i] = y[0].p;
    }
  }
  a.task_begin[kMaxGemvWarpWeights] = static_cast<int>(begin);
  a.x = x.p;
  a.x_stride = x.stride;
  a.chunks = chunks;
  a.x_pad = groups * kGroupFloats;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(grid_max, begin));
  const bool pdl = cfg && cfg->pdl;
  const size_t dyn = xs ? smem : 0;
  if (bf16)
    return nt == 1 ? launch_nt<true, 1>(a, rpw, xs, grid, dyn, pdl, dev, s)
                   : launch_nt<true, 2>(a, rpw, xs, grid, dyn, pdl, dev, s);
  return nt == 1 ? launch_nt<false, 1>(a, rpw, xs, grid, dyn, pdl, dev, s)
                 : launch_nt<false, 2>(a, rpw, xs, grid, dyn, pdl, dev, s);
}

cudaError_t launch_gemv16_warp(bool bf16, const uint16_t* w, int64_t rows, int64_t cols, int64_t w_stride_elems,
                               CRows x, Rows y, cudaStream_t s) {
  if (rows <= 0 || x.rows <= 0) return cudaSuccess;
  return launch_gemv16_warp_multi(bf16, 1, &w, &rows, cols, &w_stride_elems, x, &y, s, nullptr);
}

}  // namespace hs::cuda
