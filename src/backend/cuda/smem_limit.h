// backend/cuda/smem_limit.h — raising a kernel's dynamic shared memory limit above the default
// 48 KB, once per device: ensure_smem_limit, the one implementation the launchers that need more
// (gemv.cu's cluster GEMV, attention_mma.cu's decode attention, sparse_topk.cu's top-k) share.
// Cost: a cudaGetDevice and an atomic load per launch once set; cudaFuncSetAttribute (a host call,
// legal while a stream is being captured) once per kernel and device.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>

#include <cuda_runtime_api.h>

namespace hs::cuda {

constexpr int kSmemLimitDevices = 64;  // devices tracked (more are set on every launch)

// Lets `kernel` launch with `bytes` of dynamic shared memory: sets its limit to min(cap, the
// device's opt-in maximum) once per device (always that value, so concurrent callers agree;
// `set` is the launcher's static record). cudaErrorNotSupported, setting nothing, when `bytes` is
// over that limit.
template <typename Kernel>
cudaError_t ensure_smem_limit(Kernel kernel, size_t bytes, size_t cap,
                              std::atomic<size_t> (&set)[kSmemLimitDevices]) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (dev < kSmemLimitDevices && set[dev].load(std::memory_order_relaxed) >= bytes) return cudaSuccess;
  int optin = 0;
  e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) return e;
  const size_t limit = std::min(cap, static_cast<size_t>(optin));
  if (bytes > limit) return cudaErrorNotSupported;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(limit));
  if (e == cudaSuccess && dev < kSmemLimitDevices) set[dev].store(limit, std::memory_order_relaxed);
  return e;
}

}  // namespace hs::cuda
