// tests/ops/cuda_test_util.h — what the CUDA kernel tests that call launchers directly share
// (test_quant_gemv, test_gemv_quant_warp, test_gemv_warp): whether a device is present, an RAII
// device buffer, and the names of the quantized weight kinds. CUDA builds only.
#pragma once

#if defined(HS_WITH_CUDA)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include "backend/cuda/quant_layout.h"
#include "core/dtype.h"

namespace hs::cuda_test {

inline bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// `bytes` of device memory (at least 16), freed with the object; p is null when cudaMalloc failed.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 16)) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

inline const char* kind_name(cuda::QuantKind k) {
  return k == cuda::QuantKind::kQ4_0 ? "Q4_0" : k == cuda::QuantKind::kQ8_0 ? "Q8_0" : "Q4_K";
}
inline DType kind_dtype(cuda::QuantKind k) {
  return k == cuda::QuantKind::kQ4_0 ? DType::Q4_0 : k == cuda::QuantKind::kQ8_0 ? DType::Q8_0 : DType::Q4_K;
}

}  // namespace hs::cuda_test
#endif
