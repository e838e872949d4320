// backend/cuda/kv_stage.cu — see kv_stage.h. One CTA of 128 threads per (page, kv head): the
// head's 2P rows (token t, K then V) in 16-byte units of the source row, each thread a unit at a
// time; plain pages are a straight 16-byte copy of the head's block.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kv_stage.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/quant_decode.cuh"

namespace hs::cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ uint32_t pack_f16(float a, float b) { return h2_bits(__floats2half2_rn(a, b)); }
__device__ __forceinline__ float e4m3(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// Plain pages: the head's block [P][K|V][D] of 2-byte elements, copied.
__global__ void stage_plain_kernel(KvLayerView src, const int32_t* __restrict__ blocks, KvLayerView dst) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int64_t head_elems = int64_t{src.page_tokens} * 2 * src.head_dim;
  const uint4* s = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(src.base) +
                                                  blocks[i] * src.page_elems + h * head_elems);
  uint4* d = reinterpret_cast<uint4*>(static_cast<uint16_t*>(dst.base) + i * dst.page_elems + h * head_elems);
  for (int64_t u = threadIdx.x; u < head_elems / 8; u += kThreads) d[u] = s[u];
}

// Scaled pages: row r = 2 t + kv of the head's block, 16 source bytes per unit.
template <KvElem E>
__global__ void stage_scaled_kernel(KvLayerView src, const int32_t* __restrict__ blocks, KvLayerView dst) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int D = src.head_dim;
  const int64_t row_bytes = kv_elem_row_bytes(E, D);
  const int units = static_cast<int>(row_bytes / 16);
  const int rows = 2 * src.page_tokens;
  const uint8_t* blk = static_cast<const uint8_t*>(src.base) + blocks[i] * src.page_elems + h * src.head_stride;
  __half* out = static_cast<__half*>(dst.base) + i * dst.page_elems + int64_t{h} * rows * D;
  for (int it = threadIdx.x; it < rows * units; it += kThreads) {
    const int r = it / units, u = it % units;
    const uint4 q = *reinterpret_cast<const uint4*>(blk + r * row_bytes + 16 * u);
    const uint8_t* qb = reinterpret_cast<const uint8_t*>(&q);
    __half* orow = out + int64_t{r} * D;
    if constexpr (E == KvElem::kInt4) {
      // byte j holds element j (low nibble) and j + D/2 (high): units cover bytes 16u..16u+15.
      const uint32_t dm = *reinterpret_cast<const uint32_t*>(blk + src.scales_offset + 4 * r);
      const float d = h_lo(dm), m = h_hi(dm);
      uint32_t lo[8], hi[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const uint8_t b0 = qb[2 * e], b1 = qb[2 * e + 1];
        lo[e] = pack_f16(fmaf(static_cast<float>(b0 & 15u), d, m), fmaf(static_cast<float>(b1 & 15u), d, m));
        hi[e] = pack_f16(fmaf(static_cast<float>(b0 >> 4), d, m), fmaf(static_cast<float>(b1 >> 4), d, m));
      }
      uint4* ol = reinterpret_cast<uint4*>(orow + 16 * u);
      uint4* oh = reinterpret_cast<uint4*>(orow + D / 2 + 16 * u);
      ol[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      ol[1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
      oh[0] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      oh[1] = make_uint4(hi[4], hi[5], hi[6], hi[7]);
    } else {
      const float d = h_lo(*reinterpret_cast<const unsigned short*>(blk + src.scales_offset + 2 * r));
      uint32_t v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float a, b;
        if constexpr (E == KvElem::kInt8) {
          a = d * static_cast<float>(static_cast<int8_t>(qb[2 * e]));
          b = d * static_cast<float>(static_cast<int8_t>(qb[2 * e + 1]));
        } else {
          a = d * e4m3(qb[2 * e]);
          b = d * e4m3(qb[2 * e + 1]);
        }
        v[e] = pack_f16(a, b);
      }
      uint4* o = reinterpret_cast<uint4*>(orow + 16 * u);
      o[0] = make_uint4(v[0], v[1], v[2], v[3]);
      o[1] = make_uint4(v[4], v[5], v[6], v[7]);
    }
  }
}

}  // namespace

bool kv_stage_supported(const KvLayerView& src) {
  if (src.page_tokens < 16 || src.head_dim < 16 || src.n_kv_heads < 1 || !src.base) return false;
  if (src.elem == KvElem::kF16 || src.elem == KvElem::kBF16)
    return src.head_dim % 8 == 0 && src.page_elems >= int64_t{src.n_kv_heads} * src.page_tokens * 2 * src.head_dim &&
           src.page_elems % 8 == 0 && reinterpret_cast<uintptr_t>(src.base) % 16 == 0;
  if (!kv_elem_scaled(src.elem) || !kv_scaled_layout_ok(src)) return false;
  const int64_t row = kv_elem_row_bytes(src.elem, src.head_dim);
  return row % 16 == 0 && src.page_elems % 16 == 0 && reinterpret_cast<uintptr_t>(src.base) % 16 == 0;
}

KvLayerView kv_stage_view(const KvLayerView& src, void* base) {
  KvLayerView v;
  v.base = base;
  v.page_tokens = src.page_tokens;
  v.n_kv_heads = src.n_kv_heads;
  v.head_dim = src.head_dim;
  v.elem = src.elem == KvElem::kBF16 ? KvElem::kBF16 : KvElem::kF16;
  v.page_elems = int64_t{src.n_kv_heads} * src.page_tokens * 2 * src.head_dim;
  return v;
}

size_t kv_stage_page_bytes(const KvLayerView& src) {
  return static_cast<size_t>(src.n_kv_heads) * static_cast<size_t>(src.page_tokens) * 2 *
         static_cast<size_t>(src.head_dim) * 2;
}

cudaError_t launch_kv_stage(const KvLayerView& src, const int32_t* blocks, int n_pages, const KvLayerView& dst,
                            cudaStream_t s) {
  if (n_pages == 0) return cudaSuccess;
  const KvLayerView want = kv_stage_view(src, dst.base);
  if (n_pages < 0 || !blocks || !dst.base || !kv_stage_supported(src) || dst.elem != want.elem ||
      dst.page_elems != want.page_elems || dst.page_tokens != src.page_tokens || dst.n_kv_heads != src.n_kv_heads ||
      dst.head_dim != src.head_dim || reinterpret_cast<uintptr_t>(dst.base) % 16 != 0 || src.n_kv_heads > 65535)
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n_pages), static_cast<unsigned>(src.n_kv_heads), 1);
  switch (src.elem) {
    case KvElem::kF16:
    case KvElem::kBF16: launch_chain(stage_plain_kernel, grid, dim3(kThreads), 0, s, src, blocks, dst); break;
    case KvElem::kInt8: launch_chain(stage_scaled_kernel<KvElem::kInt8>, grid, dim3(kThreads), 0, s, src, blocks, dst); break;
    case KvElem::kInt4: launch_chain(stage_scaled_kernel<KvElem::kInt4>, grid, dim3(kThreads), 0, s, src, blocks, dst); break;
    case KvElem::kFp8: launch_chain(stage_scaled_kernel<KvElem::kFp8>, grid, dim3(kThreads), 0, s, src, blocks, dst); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace hs::cuda
