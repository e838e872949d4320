// backend/cuda/attention.cu — KV writes into the device page copy and exact paged attention.
//
// kv_write: one block per (token, kv head) converts that token's K and V rows to the cache
// dtype (f16 / bf16 round to nearest even, as kv/kv_quant.h does on the host) and stores
// them in its page slot, found through the step's CSR page table. fp8 (e4m3, kv/kv_quant.h's
// scaled layout): one warp per row (K, V) reduces max|x| with shuffles, stores the f16 scale
// d = f16(min(max|x| / 448, 65504)) and the bytes e4m3(x · (1 / float(d))) with
// __NV_SATFINITE (cvt.rn.satfinite.e4m3x2.f32), all zeros when d == 0: the host encoder's
// arithmetic step for step (IEEE division, no FMA to contract), so the pages match it byte
// for byte (tests/ops: Fp8KvWriteMatchesHostBytes).
//
// attention (flash-decoding): the keys [first, pos] of a token are cut into n_splits runs of
// split_len keys. A block of kWarps warps handles one (token, kv head, run) for all G query
// heads of that kv head, so each K / V row is read once per GQA group. Warp w takes tiles of
// U consecutive keys (U = 8 for head_dim <= 128), tile t of the run at begin + (w + t * kWarps) * U;
// its 32 lanes each hold head_dim / 32 consecutive elements of a row (one 4-16 byte load per
// row, coalesced across the warp), and the 2U row loads of a tile are all in flight before
// the tile's arithmetic. A score is a lane dot plus a 5-step butterfly (U independent chains);
// every warp keeps an online softmax (max, sum, acc) per query head, rescaled once per tile;
// the warps merge through shared memory. With one run the block writes the
// normalised output; with more it writes a partial (max[G], sum[G], acc[G][head_dim]) and
// merge_kernel combines the runs of each (token, kv head) like backend/cpu's attention_merge.
// Math is fp32 throughout (expf, not __expf), K/V widened exactly from their storage type;
// fp8 rows load head_dim / 32 bytes per lane (2, 4 or 8: one load), widen pairs with
// cvt.rn.f16x2.e4m3x2 and multiply by the row's f16 scale (one 4-byte load per token holds
// the K and V scales, the same address for every lane) — exactly the host's decoded floats.
// Cost: reads (keys * 2 * head_dim) stored elements per (token, kv head): decode is
// memory-bound with U rows per warp in flight; prefill re-reads the prompt's K/V once per
// query token (L2-resident for short prompts) — a tensor-core flash prefill is the speed work
// left (docs/cuda-backend.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels.h"

namespace hs::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kMinSplit = 256;   // keys: no run shorter than this (unless the range is)
constexpr int kBlocksPerSm = 4;  // what the split aims at

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// E consecutive stored elements at p (aligned to their size, at least 4 bytes) -> floats,
// in 16-, 8- or 4-byte loads.
template <typename T, int E>
__device__ __forceinline__ void load_row(const T* __restrict__ p, float (&out)[E]) {
  constexpr int kBytes = E * static_cast<int>(sizeof(T));
  static_assert(kBytes % 4 == 0, "row pieces are whole words");
  union {
    T t[E];
    uint4 v16[(kBytes + 15) / 16];
    uint2 v8[(kBytes + 7) / 8];
    uint32_t v4[kBytes / 4];
  } u;
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) u.v16[c] = reinterpret_cast<const uint4*>(p)[c];
  } else if constexpr (kBytes % 8 == 0) {
#pragma unroll
    for (int c = 0; c < kBytes / 8; ++c) u.v8[c] = reinterpret_cast<const uint2*>(p)[c];
  } else {
#pragma unroll
    for (int c = 0; c < kBytes / 4; ++c) u.v4[c] = reinterpret_cast<const uint32_t*>(p)[c];
  }
#pragma unroll
  for (int e = 0; e < E; ++e) out[e] = to_f(u.t[e]);
}


// The attention kernel's element type for fp8 KV (bytes of kv/kv_quant.h's scaled layout).
struct Fp8 {};

// Two e4m3 bytes (the lower address in the low byte) -> two floats times d; exact.
__device__ __forceinline__ void fp8x2_to_f(unsigned short two, float d, float& a, float& b) {
  const __half2 h(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3));
  const float2 f = __half22float2(h);
  a = f.x * d;
  b = f.y * d;
}

// E consecutive e4m3 bytes at p (aligned to E) -> floats times d, in one 2-, 4- or 8-byte load.
template <int E>
__device__ __forceinline__ void load_fp8_row(const uint8_t* __restrict__ p, float d, float (&out)[E]) {
  static_assert(E == 2 || E == 4 || E == 8, "head_dim 64, 128 or 256");
  if constexpr (E == 2) {
    fp8x2_to_f(*reinterpret_cast<const unsigned short*>(p), d, out[0], out[1]);
  } else if constexpr (E == 4) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
    fp8x2_to_f(static_cast<unsigned short>(w & 0xffffu), d, out[0], out[1]);
    fp8x2_to_f(static_cast<unsigned short>(w >> 16), d, out[2], out[3]);
  } else {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    fp8x2_to_f(static_cast<unsigned short>(w.x & 0xffffu), d, out[0], out[1]);
    fp8x2_to_f(static_cast<unsigned short>(w.x >> 16), d, out[2], out[3]);
    fp8x2_to_f(static_cast<unsigned short>(w.y & 0xffffu), d, out[4], out[5]);
    fp8x2_to_f(static_cast<unsigned short>(w.y >> 16), d, out[6], out[7]);
  }
}

__device__ __forceinline__ float f16_bits_to_f(unsigned short b) { return __half2float(__ushort_as_half(b)); }

// ---- kv_write ------------------------------------------------------------------------------

template <typename T>
__global__ void kv_write_kernel(KvLayerView kv, StepTables t, CRows k, CRows v) {
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

// grid (n tokens, n_kv heads), 64 threads: warp 0 encodes the K row, warp 1 the V row.
__global__ void __launch_bounds__(64) kv_write_fp8_kernel(KvLayerView kv, StepTables t, CRows k, CRows v) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int kvi = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hd = kv.head_dim, P = kv.page_tokens;
  const int32_t pos = t.positions[i];
  const int32_t page = t.page_indices[t.page_indptr[t.seq_index[i]] + pos / P];
  uint8_t* blk = static_cast<uint8_t*>(kv.base) + static_cast<int64_t>(page) * kv.page_elems +
                 static_cast<int64_t>(h) * kv.head_stride;
  const int slot = (pos % P) * 2 + kvi;  // (token, K|V) of the block
  const float* x = (kvi == 0 ? k.p + i * k.stride : v.p + i * v.stride) + static_cast<int64_t>(h) * hd;
  float amax = 0.0f;
  for (int d = lane; d < hd; d += 32) amax = fmaxf(amax, fabsf(x[d]));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  // IEEE-rounded intrinsics whatever the -prec-div / -fmad flags: the host's arithmetic.
  const __half dh = __float2half_rn(fminf(__fdiv_rn(amax, 448.0f), 65504.0f));
  const float df = __half2float(dh);
  uint8_t* row = blk + static_cast<int64_t>(slot) * hd;
  if (df > 0.0f) {
    const float inv = __fdiv_rn(1.0f, df);
    for (int d = lane; d < hd; d += 32)
      row[d] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(x[d], inv), __NV_SATFINITE, __NV_E4M3));
  } else {
    for (int d = lane; d < hd; d += 32) row[d] = 0;
  }
  if (lane == 0) *reinterpret_cast<__half*>(blk + kv.scales_offset + 2 * slot) = dh;
}

// ---- attention -----------------------------------------------------------------------------

struct KernelArgs {
  KvLayerView kv;
  StepTables t;
  CRows q;
  Rows out;
  int group;  // G query heads per kv head
  float scale;
  int window;
  int n_splits, split_len;
  int page_shift;   // log2(page_tokens): pages are a power of two of tokens
  float* part_max;  // [n][n_kv][n_splits][G]
  float* part_sum;  // [n][n_kv][n_splits][G]
  float* part_acc;  // [n][n_kv][n_splits][G][D]
};

__device__ __forceinline__ int32_t first_key(int32_t pos, int window) {
  return window > 0 ? max(0, pos - window + 1) : 0;
}

// grid (n tokens, n_kv heads, n_splits), kThreads threads. MAXG >= group: query heads are
// kept in registers, heads g >= group are skipped (uniformly across the block). T: float,
// __half, __nv_bfloat16 (plain pages) or Fp8 (scaled pages, KvLayerView).
template <typename T, int D, int MAXG>
__global__ void __launch_bounds__(kThreads) attention_kernel(KernelArgs a) {
  constexpr int E = D / 32;  // elements per lane
  const int64_t i = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int G = a.group, P = a.kv.page_tokens;

  const int32_t pos = a.t.positions[i];
  const int32_t first = first_key(pos, a.window);
  const int32_t begin = first + split * a.split_len;
  const int32_t end = min(pos + 1, begin + a.split_len);  // may be <= begin: empty run

  float q[MAXG][E], acc[MAXG][E], m[MAXG], l[MAXG];
#pragma unroll
  for (int g = 0; g < MAXG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      acc[g][e] = 0.0f;
      q[g][e] = 0.0f;
    }
    if (g < G) {
      const float* qr = a.q.p + i * a.q.stride + static_cast<int64_t>(kvh * G + g) * D + lane * E;
#pragma unroll
      for (int e = 0; e < E; ++e) q[g][e] = qr[e] * a.scale;
    }
  }

  // Keys in tiles of U per warp (warp w takes tiles begin + (w + t * kWarps) * U): all 2U row
  // loads of a tile are issued before any arithmetic on them (memory-level parallelism: the
  // kernel is bandwidth-bound only with many rows in flight per SM), the U x G scores reduce
  // as independent shuffle chains, and the online softmax rescales once per tile.
  constexpr int U = (E * MAXG >= 64) ? 2 : (E >= 8 ? 4 : 8);
  const int32_t* pages = a.t.page_indices + a.t.page_indptr[a.t.seq_index[i]];
  for (int32_t j0 = begin + warp * U; j0 < end; j0 += kWarps * U) {
    float k[U][E], v[U][E];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t j = j0 + u;
      if (j >= end) {
#pragma unroll
        for (int e = 0; e < E; ++e) k[u][e] = v[u][e] = 0.0f;
        continue;
      }
      if constexpr (std::is_same_v<T, Fp8>) {
        const uint8_t* blk = static_cast<const uint8_t*>(a.kv.base) +
                             static_cast<int64_t>(pages[j / P]) * a.kv.page_elems +
                             static_cast<int64_t>(kvh) * a.kv.head_stride;
        const int tp = j % P;
        // The K and V scales of token tp: adjacent f16s, 4-byte aligned (blocks are 16-aligned).
        const uint32_t sc = *reinterpret_cast<const uint32_t*>(blk + a.kv.scales_offset + 4 * tp);
        const uint8_t* row = blk + static_cast<int64_t>(tp) * 2 * D;
        load_fp8_row<E>(row + lane * E, f16_bits_to_f(static_cast<unsigned short>(sc & 0xffffu)), k[u]);
        load_fp8_row<E>(row + D + lane * E, f16_bits_to_f(static_cast<unsigned short>(sc >> 16)), v[u]);
      } else {
        const T* row = static_cast<const T*>(a.kv.base) + static_cast<int64_t>(pages[j / P]) * a.kv.page_elems +
                       (static_cast<int64_t>(kvh) * P + j % P) * 2 * D;
        load_row<T, E>(row + lane * E, k[u]);
        load_row<T, E>(row + D + lane * E, v[u]);
      }
    }
#pragma unroll
    for (int g = 0; g < MAXG; ++g) {
      if (g < G) {
        float sc[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < E; ++e) d += q[g][e] * k[u][e];
          sc[u] = d;
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
#pragma unroll
          for (int u = 0; u < U; ++u) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], off);
        float mn = m[g];
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (j0 + u < end) mn = fmaxf(mn, sc[u]);
        const float corr = m[g] == -INFINITY ? 0.0f : expf(m[g] - mn);
        l[g] *= corr;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] *= corr;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const float p = j0 + u < end ? expf(sc[u] - mn) : 0.0f;
          l[g] += p;
#pragma unroll
          for (int e = 0; e < E; ++e) acc[g][e] += p * v[u][e];
        }
        m[g] = mn;
      }
    }
  }

  // Merge the warps: shared [kWarps][MAXG] max / sum and [kWarps][MAXG][D] acc.
  __shared__ float sm_m[kWarps][MAXG], sm_l[kWarps][MAXG];
  __shared__ float sm_acc[kWarps][MAXG][D];
#pragma unroll
  for (int g = 0; g < MAXG; ++g) {
    if (g < G) {
      if (lane == 0) {
        sm_m[warp][g] = m[g];
        sm_l[warp][g] = l[g];
      }
#pragma unroll
      for (int e = 0; e < E; ++e) sm_acc[warp][g][lane * E + e] = acc[g][e];
    }
  }
  __syncthreads();

  const bool direct = a.n_splits == 1;
  const int64_t pidx = (i * a.kv.n_kv_heads + kvh) * a.n_splits + split;  // partial slot
  for (int idx = threadIdx.x; idx < G * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w][g]);
    float total = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = sm_m[w][g] == -INFINITY ? 0.0f : expf(sm_m[w][g] - mx);
      total += sm_l[w][g] * wt;
      o += wt * sm_acc[w][g][d];
    }
    if (direct) {
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
      a.out.p[i * a.out.stride + static_cast<int64_t>(kvh * G + g) * D + d] = o * inv;
    } else {
      a.part_acc[(pidx * G + g) * D + d] = o;
      if (d == 0) {
        a.part_max[pidx * G + g] = mx;
        a.part_sum[pidx * G + g] = total;
      }
    }
  }
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
  __shared__ float wt[kMaxRuns];
  __shared__ float red[kWarps];
  const int64_t i = blockIdx.x;
  const int G = a.group;
  const int kvh = blockIdx.y / G, g = blockIdx.y % G;
  const int32_t pos = a.t.positions[i];
  const int32_t range = pos + 1 - first_key(pos, a.window);
  const int n_runs = min(a.n_splits, (range + a.split_len - 1) / a.split_len);
  const int64_t p0 = (i * a.kv.n_kv_heads + kvh) * a.n_splits;
  float mx = -INFINITY;
  for (int p = threadIdx.x; p < n_runs; p += kThreads) mx = fmaxf(mx, a.part_max[(p0 + p) * G + g]);
  mx = block_reduce(mx, true, red);
  float total = 0.0f;
  for (int p = threadIdx.x; p < n_runs; p += kThreads) {
    const float pm = a.part_max[(p0 + p) * G + g];
    const float w = pm == -INFINITY ? 0.0f : expf(pm - mx);  // an empty run: its acc holds nothing
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
    attention_kernel<T, D, 1><<<grid, kThreads, 0, s>>>(a);
  } else if (a.group <= 2) {
    attention_kernel<T, D, 2><<<grid, kThreads, 0, s>>>(a);
  } else if (a.group <= 4) {
    attention_kernel<T, D, 4><<<grid, kThreads, 0, s>>>(a);
  } else {
    attention_kernel<T, D, 8><<<grid, kThreads, 0, s>>>(a);
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
  if (kv.elem == KvElem::kFp8 &&
      (kv.head_stride < 2LL * kv.page_tokens * (kv.head_dim + 2) || kv.head_stride % 16 != 0 ||
       kv.scales_offset != 2LL * kv.page_tokens * kv.head_dim))
    return cudaErrorInvalidValue;
  switch (kv.elem) {
    case KvElem::kF32: kv_write_kernel<float><<<grid, threads, 0, s>>>(kv, t, k, v); break;
    case KvElem::kF16: kv_write_kernel<__half><<<grid, threads, 0, s>>>(kv, t, k, v); break;
    case KvElem::kBF16: kv_write_kernel<__nv_bfloat16><<<grid, threads, 0, s>>>(kv, t, k, v); break;
    case KvElem::kFp8: kv_write_fp8_kernel<<<grid, 64, 0, s>>>(kv, t, k, v); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

AttnSplit plan_attention_split(int64_t n_tokens, int n_kv_heads, int32_t max_range, int n_sm) {
  AttnSplit sp;
  const int64_t base = std::max<int64_t>(1, n_tokens * n_kv_heads);
  const int64_t target = static_cast<int64_t>(kBlocksPerSm) * std::max(1, n_sm);
  const int64_t range = std::max<int32_t>(1, max_range);
  int64_t n = 1;
  if (base < target) {
    const int64_t by_len = (range + kMinSplit - 1) / kMinSplit;
    const int64_t by_blocks = (target + base - 1) / base;
    n = std::max<int64_t>(1, std::min({by_len, by_blocks, int64_t{kMaxRuns}}));
  }
  // Runs of a multiple of kWarps x 8 keys (whole tiles for every warp), then as few runs as
  // that length needs.
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
  if (kv.elem == KvElem::kFp8 && (kv.head_stride % 16 != 0 || kv.scales_offset != 2LL * kv.page_tokens * kv.head_dim ||
                                  kv.head_stride < kv.scales_offset + 4LL * kv.page_tokens))
    return cudaErrorInvalidValue;
  if (kv.page_tokens <= 0 || (kv.page_tokens & (kv.page_tokens - 1)) != 0) return cudaErrorInvalidValue;
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
  const size_t parts = static_cast<size_t>(q.rows) * a.n_head_kv * a.split.n_splits * group;
  ka.part_max = a.scratch;
  ka.part_sum = a.scratch ? a.scratch + parts : nullptr;
  ka.part_acc = a.scratch ? a.scratch + 2 * parts : nullptr;

  const dim3 grid(static_cast<unsigned>(q.rows), static_cast<unsigned>(a.n_head_kv),
                  static_cast<unsigned>(a.split.n_splits));
  cudaError_t err = cudaErrorInvalidValue;
  switch (kv.elem) {
    case KvElem::kF32: err = launch_dim<float>(ka, a.head_dim, grid, s); break;
    case KvElem::kF16: err = launch_dim<__half>(ka, a.head_dim, grid, s); break;
    case KvElem::kBF16: err = launch_dim<__nv_bfloat16>(ka, a.head_dim, grid, s); break;
    case KvElem::kFp8: err = launch_dim<Fp8>(ka, a.head_dim, grid, s); break;
  }
  if (err != cudaSuccess || ka.n_splits == 1) return err;
  merge_kernel<<<dim3(static_cast<unsigned>(q.rows), static_cast<unsigned>(a.n_head)), kThreads, 0, s>>>(
      ka, a.head_dim);
  return cudaGetLastError();
}

}  // namespace hs::cuda
