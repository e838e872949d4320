// core/weight_view.h — a non-owning view of one weight matrix as the file stores it (GGUF /
// ggml order, any stored type). The model's weight tables hold these; each backend reads or
// uploads them (the CPU backend's matmul reads the stored bytes directly). Costs nothing.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hs {

// A weight matrix in ggml order: ne0 = n_in (contiguous), ne1 = n_out.
struct WeightView {
  DType type = DType::F32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  const void* data = nullptr;  // [n_out][row_bytes(type, n_in)]
};

}  // namespace hs
