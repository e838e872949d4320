// backend/cuda/attention_decode.cuh — what the two decode attention kernels share: the CUDA-core
// kernel (attention.cu: exact f32 math, every page type) and the tensor-core one
// (attention_mma.cu: 16-bit pages and 8-bit pages widened to f16, mma.sync), both launched by
// launch_attention (attention.cu) on the same grid (token, kv head, run) with the same partials,
// which attention.cu's merge_kernel combines.
//
// Owns KernelArgs (the launch's view of AttnArgs), the keys a (token, kv head) row attends
// (row_keys), the cp.async / exp2 primitives and the block epilogue that merges a block's
// sub-groups and writes the output or the run's partial (write_merged). Device code only.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "backend/cuda/kernels.h"

namespace hs::cuda::attn {

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
  // Sparse rows (AttnArgs::sp_*): row (i, kv head) with sp_len >= 0 attends keys [0, sp_len) of
  // the page list sp_pages + row * sp_stride; null or -1: the token's own pages, dense.
  const int32_t* sp_pages;
  const int32_t* sp_len;
  int sp_stride;
  // Host tier (AttnArgs::sp_base): a sparse row's pages are slots of its kv head's hot pool.
  const char* sp_base;
  int64_t sp_head_bytes;
  uint32_t sp_page_bytes;
  float* part_max;  // [n][n_kv][n_splits][G], log2 units: max of scale * log2(e) * q.k (or -inf: empty)
  float* part_sum;  // [n][n_kv][n_splits][G]: sum of 2^(s - max)
  float* part_acc;  // [n][n_kv][n_splits][G][D]: sum of 2^(s - max) v
};

__device__ __forceinline__ int32_t first_key(int32_t pos, int window) {
  return window > 0 ? max(0, pos - window + 1) : 0;
}

// The keys of (token i, kv head): [first, pos] through `pages` (dense: the sequence's pages and
// the window; a sparse row: its selected pages, keys [0, sp_len)).
struct RowKeys {
  int32_t pos, first;
  const int32_t* pages;
  bool hot;  // pages are hot-pool slots (AttnArgs::sp_base)
};
__device__ __forceinline__ RowKeys row_keys(const KernelArgs& a, int64_t i, int kvh) {
  if (a.sp_len) {
    const int64_t row = i * a.kv.n_kv_heads + kvh;
    const int32_t len = a.sp_len[row];
    if (len >= 0) return RowKeys{len - 1, 0, a.sp_pages + row * a.sp_stride, a.sp_base != nullptr};
  }
  const int32_t pos = a.t.positions[i];
  return RowKeys{pos, first_key(pos, a.window), a.t.page_indices + a.t.page_indptr[a.t.seq_index[i]], false};
}

constexpr float kLog2e = 1.4426950408889634f;
// The softmax reference max may lag the true running max by this much (log2 units): p <= 2^8,
// and the accumulators are rescaled only when a score passes it (rare after the first tile).
constexpr float kSlack = 8.0f;

// 2^x, MUFU.EX2 (ex2.approx.ftz: ~2 ulp; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// cp.async of BYTES (4, 8 or 16) from global src + OFF to shared dst (a shared-window
// address); !valid copies nothing and zero-fills dst (src-size 0: src is not read). OFF is an
// immediate of the instruction (no 64-bit address arithmetic per row).
template <int BYTES, int OFF = 0>
__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? BYTES : 0;
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1+%2], 16, %3;\n" ::"r"(dst), "l"(src), "n"(OFF), "r"(n) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1+%2], %3, %4;\n" ::"r"(dst), "l"(src), "n"(OFF), "n"(BYTES), "r"(n)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The f16 in the low / high half of a word (a row's (K, V) scales, int4's (d, m)), as float.
__device__ __forceinline__ float f16_lo(uint32_t w) { return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu))); }
__device__ __forceinline__ float f16_hi(uint32_t w) { return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16))); }

// The block epilogue: NSG sub-groups' reference max (log2 units), probability sum and
// accumulators of MAXG query heads, staged in shared memory as sm_m [NSG][MAXG], sm_l
// [NSG][MAXG], sm_acc [NSG][MAXG][D] (an empty sub-group: max -FLT_MAX, sum 0, acc 0), are merged
// per (head, element) and written as the normalised output (one run) or as the run's partial
// (max, sum, acc) for merge_kernel. Threads tid of NTHREADS stride over G x D.
template <int NSG, int MAXG, int NTHREADS>
__device__ __forceinline__ void write_merged(const KernelArgs& a, const float* sm_m, const float* sm_l,
                                             const float* sm_acc, int D, int64_t i, int kvh, int split, int tid) {
  const int G = a.group;
  const bool direct = a.n_splits == 1;
  const int64_t pidx = (i * a.kv.n_kv_heads + kvh) * a.n_splits + split;  // partial slot
  for (int idx = tid; idx < G * D; idx += NTHREADS) {
    const int g = idx / D, d = idx % D;
    float mx = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < NSG; ++w) mx = fmaxf(mx, sm_m[w * MAXG + g]);
    float total = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < NSG; ++w) {
      const float wt = exp2f(sm_m[w * MAXG + g] - mx);  // an empty sub-group: l = acc = 0
      total += sm_l[w * MAXG + g] * wt;
      o += wt * sm_acc[(w * MAXG + g) * D + d];
    }
    if (direct) {
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
      a.out.p[i * a.out.stride + static_cast<int64_t>(kvh * G + g) * D + d] = o * inv;
    } else {
      a.part_acc[(pidx * G + g) * D + d] = o;
      if (d == 0) {
        a.part_max[pidx * G + g] = total > 0.0f ? mx : -INFINITY;
        a.part_sum[pidx * G + g] = total;
      }
    }
  }
}

// The tensor-core decode kernel (attention_mma.cu) for this launch, when it takes the page type,
// head_dim and page size (attention_mma_takes): launches it on `grid` (its partials, as the
// CUDA-core kernel's, go to merge_kernel when a.n_splits > 1); cudaErrorNotSupported, launching
// nothing, when the device's blocks cannot have its shared memory.
bool attention_mma_takes(KvElem elem, int head_dim, int group, int page_tokens);
cudaError_t launch_attention_mma(const KernelArgs& a, KvElem elem, int head_dim, dim3 grid, cudaStream_t s);

}  // namespace hs::cuda::attn
