// backend/communicator.cpp — HostCommunicator and the communicator factory (communicator.h).
#include "backend/communicator.h"

#include <cstring>

#if HS_WITH_CUDA
#include "backend/cuda/nccl_communicator.h"
#endif

namespace hs {

namespace {

Status check_parts(std::span<const Tensor> x, int size, const char* what) {
  if (static_cast<int>(x.size()) != size)
    return make_error(StatusCode::kInvalidArgument, "{}: {} tensors for {} ranks", what, x.size(), size);
  for (const Tensor& t : x) {
    if (t.dtype != DType::F32 || t.device != Device::kCpu)
      return make_error(StatusCode::kInvalidArgument, "{}: the host communicator takes f32 host tensors", what);
    if (t.rows != x[0].rows)
      return make_error(StatusCode::kInvalidArgument, "{}: ranks disagree on the rows ({} vs {})", what, t.rows,
                        x[0].rows);
  }
  return Status::ok();
}

}  // namespace

Status HostCommunicator::all_reduce_sum(std::span<const Tensor> x) {
  HS_RETURN_IF_ERROR(check_parts(x, size_, "all_reduce_sum"));
  for (const Tensor& t : x)
    if (t.cols != x[0].cols)
      return make_error(StatusCode::kInvalidArgument, "all_reduce_sum: ranks disagree on the columns ({} vs {})",
                        t.cols, x[0].cols);
  if (size_ == 1) return Status::ok();
  const int64_t cols = x[0].cols;
  for (int64_t r = 0; r < x[0].rows; ++r) {
    float* acc = x[0].slice_rows(r, r + 1).f32();
    for (int k = 1; k < size_; ++k) {
      const float* src = x[k].slice_rows(r, r + 1).f32();
      for (int64_t c = 0; c < cols; ++c) acc[c] += src[c];
    }
    for (int k = 1; k < size_; ++k) std::memcpy(x[k].slice_rows(r, r + 1).f32(), acc, cols * sizeof(float));
  }
  return Status::ok();
}

Status HostCommunicator::gather_columns(std::span<const Tensor> parts, Tensor out) {
  HS_RETURN_IF_ERROR(check_parts(parts, size_, "gather_columns"));
  int64_t total = 0;
  for (const Tensor& t : parts) total += t.cols;
  if (out.dtype != DType::F32 || out.rows != parts[0].rows || out.cols != total)
    return make_error(StatusCode::kInvalidArgument, "gather_columns: out is [{}][{}], the parts make [{}][{}]", out.rows,
                      out.cols, parts[0].rows, total);
  for (int64_t r = 0; r < out.rows; ++r) {
    float* dst = out.slice_rows(r, r + 1).f32();
    for (const Tensor& t : parts) {
      std::memcpy(dst, t.slice_rows(r, r + 1).f32(), t.cols * sizeof(float));
      dst += t.cols;
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<Communicator>> make_communicator(std::span<Backend* const> ranks) {
  if (ranks.empty()) return make_error(StatusCode::kInvalidArgument, "a communicator needs at least one rank");
  const Device d = ranks[0]->device();
  for (Backend* b : ranks)
    if (b->device() != d)
      return make_error(StatusCode::kInvalidArgument, "tensor-parallel ranks must share one device kind");
  if (d == Device::kCpu) return std::unique_ptr<Communicator>(std::make_unique<HostCommunicator>(static_cast<int>(ranks.size())));
#if HS_WITH_CUDA
  return cuda::make_nccl_communicator(ranks);
#else
  return make_error(StatusCode::kUnsupported, "no communicator for {} in this build", device_name(d));
#endif
}

}  // namespace hs
