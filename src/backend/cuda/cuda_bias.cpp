// backend/cuda/cuda_bias.cpp — CudaBackend::add_bias (cuda_backend.h): host checks of both
// operands (device, dtype, shape, strides), then the launcher of bias_kernel.h on the
// backend's stream. Nothing waits or allocates, so it can sit inside a captured graph.
// Cost: a few comparisons plus one kernel launch.
#include "backend/cuda/bias_kernel.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

namespace hs::cuda {

Status CudaBackend::add_bias(Tensor x, const Tensor& bias) {
  OpProfile::Scope prof(&profile_, "add_bias", stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_f32(x, "add_bias", "x"));
  HS_RETURN_IF_ERROR(check_f32(bias, "add_bias", "bias"));
  if (bias.rows * bias.cols != x.cols || !(bias.rows <= 1 || bias.contiguous()))
    return make_error(StatusCode::kInvalidArgument, "cuda add_bias: bias {} for rows of {}", shape(bias), x.cols);
  return launched(launch_add_bias(rows_of(x), bias.f32(), stream_), "add_bias");
}

}  // namespace hs::cuda
