// backend/cpu_checks.h — operand checks the CPU backend's op files share (cpu_backend.cpp,
// cpu_backend_hybrid.cpp): each returns a clear error naming the op and the operand.
#pragma once

#include "core/status.h"
#include "core/tensor.h"

namespace hs::cpu_checks {

// Host f32 rows, contiguous or strided by whole floats (a column slice of a wider matrix).
inline Status need_rows(const Tensor& t, const char* op, const char* what) {
  if (t.dtype != DType::F32 || t.device != Device::kCpu || t.row_stride < t.row_bytes() || t.row_stride % 4 != 0)
    return make_error(StatusCode::kInvalidArgument, "{}: {} must be host f32 rows (got {} on {}, row stride {} B)", op,
                      what, dtype_name(t.dtype), device_name(t.device), t.row_stride);
  return Status::ok();
}

}  // namespace hs::cpu_checks
