// backend/cuda/cuda_check.h — the CUDA backend's host-side checks (internal to backend/cuda).
//
// HS_CUDA / HS_CUBLAS turn a failed runtime or cuBLAS call into a Status naming the call,
// file:line and the library's message; the check_* helpers validate a Tensor's device, dtype,
// shape and strides before a launch and name the op and operand in the error. Shared by
// cuda_backend.cpp (memory, weights, steps) and cuda_ops.cpp (the ops). Host C++20 only.
// Cost: a few comparisons per operand; strings only on the error path.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "backend/cuda/kernels.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hs::cuda {

inline Status cuda_failure(cudaError_t e, const char* expr, const char* file, int line) {
  return make_error(StatusCode::kInternal, "cuda: {} failed at {}:{}: {} ({})", expr, file, line, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

inline Status cublas_failure(cublasStatus_t s, const char* expr, const char* file, int line) {
  return make_error(StatusCode::kInternal, "cublas: {} failed at {}:{}: {} ({})", expr, file, line,
                    cublasGetStatusString(s), static_cast<int>(s));
}

#define HS_CUDA(expr)                                                                           \
  do {                                                                                          \
    const cudaError_t hs_cuda_err_ = (expr);                                                    \
    if (hs_cuda_err_ != cudaSuccess) return cuda_failure(hs_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define HS_CUBLAS(expr)                                                                               \
  do {                                                                                                \
    const cublasStatus_t hs_cublas_st_ = (expr);                                                      \
    if (hs_cublas_st_ != CUBLAS_STATUS_SUCCESS) return cublas_failure(hs_cublas_st_, #expr, __FILE__, __LINE__); \
  } while (0)

inline Status launched(cudaError_t e, const char* op) {
  if (e == cudaSuccess) return Status::ok();
  return make_error(StatusCode::kInternal, "cuda {}: kernel launch failed: {} ({})", op, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

inline std::string gib(size_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0)); }

inline std::string shape(const Tensor& t) { return fmt::format("[{}][{}] {}", t.rows, t.cols, dtype_name(t.dtype)); }

inline Status check_on_device(const Tensor& t, const char* op, const char* what) {
  if (t.device != Device::kCuda)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} is in {} memory, not on the CUDA device", op, what,
                      device_name(t.device));
  if (t.rows < 0 || t.cols < 0)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} has a negative shape {}", op, what, shape(t));
  if (t.rows > 0 && t.cols > 0) {
    if (t.data == nullptr) return make_error(StatusCode::kInvalidArgument, "cuda {}: {} {} has no data", op, what, shape(t));
    if (t.row_stride < t.row_bytes())
      return make_error(StatusCode::kInvalidArgument, "cuda {}: {} {} has row stride {} B < its row's {} B", op, what,
                        shape(t), t.row_stride, t.row_bytes());
  }
  return Status::ok();
}

inline Status check_f32(const Tensor& t, const char* op, const char* what) {
  HS_RETURN_IF_ERROR(check_on_device(t, op, what));
  if (t.dtype != DType::F32)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} is {}, want f32", op, what, dtype_name(t.dtype));
  if (t.row_stride % 4 != 0)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} row stride {} B is not a multiple of 4", op, what,
                      t.row_stride);
  return Status::ok();
}

inline Status check_same_shape(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  if (a.rows == b.rows && a.cols == b.cols) return Status::ok();
  return make_error(StatusCode::kInvalidArgument, "cuda {}: {} is [{}][{}] but {} is [{}][{}]", op, an, a.rows, a.cols,
                    bn, b.rows, b.cols);
}

inline Status check_rows(const Tensor& t, int64_t n, const char* op, const char* what) {
  if (t.rows == n) return Status::ok();
  return make_error(StatusCode::kInvalidArgument, "cuda {}: {} has {} rows, the step has {} tokens", op, what, t.rows, n);
}

inline Rows rows_of(const Tensor& t) { return Rows{t.f32(), t.rows, t.cols, t.row_stride / 4}; }
inline CRows crows_of(const Tensor& t) { return CRows{t.f32(), t.rows, t.cols, t.row_stride / 4}; }

}  // namespace hs::cuda
