// backend/cuda/kv_elem.cuh — the rounding of an f32 K / V value into a plain KV page element
// (f32, f16, bf16: round to nearest even), shared by every kernel that writes page bytes
// (kv_write, RoPE + KV write, the hot set's top-up), so a piece written anywhere is the same bits;
// and its exact widening back to f32 (to_f) for the kernels that read single elements.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace hs::cuda {

template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }


template <typename T>
__device__ __forceinline__ float to_f(T x);
template <>
__device__ __forceinline__ float to_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

}  // namespace hs::cuda
