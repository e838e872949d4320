// model/workspace.cpp — carve_activations and LogitRows::reserve (workspace.h).
#include "model/workspace.h"

namespace hs {

namespace {
int64_t aligned_floats(int64_t n) { return (n + 15) / 16 * 16; }  // 64-byte aligned tensors
}  // namespace

Status carve_activations(Backend& b, int64_t rows, std::span<const int64_t> widths, std::span<Tensor* const> slots,
                         std::string_view what, Buffer& mem) {
  if (widths.size() != slots.size())
    return make_error(StatusCode::kInternal, "{}: {} widths for {} tensors", what, widths.size(), slots.size());
  int64_t floats = 0;
  for (int64_t w : widths) floats += aligned_floats(rows * w);
  mem.reset();
  HS_ASSIGN_OR_RETURN(mem, b.alloc(static_cast<size_t>(floats) * 4, what));
  float* p = static_cast<float*>(mem.data());
  for (size_t i = 0; i < slots.size(); ++i) {
    *slots[i] = Tensor::matrix(p, DType::F32, rows, widths[i], b.device());
    p += aligned_floats(rows * widths[i]);
  }
  return Status::ok();
}

Status LogitRows::reserve(Backend& b, int64_t n_embd, int64_t n_vocab, int64_t rows) {
  if (rows <= capacity) return Status::ok();
  const int64_t h = aligned_floats(rows * n_embd);
  mem.reset();
  HS_ASSIGN_OR_RETURN(mem, b.alloc(static_cast<size_t>(h + rows * n_vocab) * 4, "the logits rows"));
  float* p = static_cast<float*>(mem.data());
  hsel = Tensor::matrix(p, DType::F32, rows, n_embd, b.device());
  logits = Tensor::matrix(p + h, DType::F32, rows, n_vocab, b.device());
  if (b.device() != Device::kCpu) {
    host.reset();
    HS_ASSIGN_OR_RETURN(host, b.alloc_host(static_cast<size_t>(rows * n_vocab) * 4, "the logits rows (host)"));
  }
  capacity = rows;
  return Status::ok();
}

}  // namespace hs
