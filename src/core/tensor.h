// core/tensor.h — a non-owning view of a 2-D tensor in some device's memory.
//
// Every buffer the forward pass touches is a matrix of `rows` rows of `cols` elements of
// `dtype`, rows `row_stride` bytes apart (ggml order: cols is the contiguous dimension, so a
// GGUF weight [n_out][n_in] is rows = n_out, cols = n_in). Quantized block types count cols
// in elements; a row then holds cols / block_elems blocks. Who owns the memory: a backend's
// allocation (weights, KV pages) or a model's Workspace (activations); a Tensor never frees.
// Cost: a few words; slicing rows is pointer arithmetic.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace hs {

enum class Device : uint8_t { kCpu, kCuda };
inline const char* device_name(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

// Bytes of one row of `cols` elements of `t` (whole blocks); 0 for an unknown type.
inline int64_t tensor_row_bytes(DType t, int64_t cols) {
  const auto info = dtype_info(t);
  return info ? static_cast<int64_t>(dtype_row_bytes(*info, static_cast<uint64_t>(cols))) : 0;
}

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // bytes between rows
  Device device = Device::kCpu;

  static Tensor matrix(void* data, DType t, int64_t rows, int64_t cols, Device dev = Device::kCpu) {
    return Tensor{data, t, rows, cols, tensor_row_bytes(t, cols), dev};
  }
  static Tensor matrix(const void* data, DType t, int64_t rows, int64_t cols, Device dev = Device::kCpu) {
    return matrix(const_cast<void*>(data), t, rows, cols, dev);
  }
  bool empty() const { return data == nullptr || rows == 0; }
  int64_t row_bytes() const { return tensor_row_bytes(dtype, cols); }
  bool contiguous() const { return row_stride == row_bytes(); }
  int64_t bytes() const { return rows * row_stride; }
  // Rows [begin, end) of this tensor.
  Tensor slice_rows(int64_t begin, int64_t end) const {
    Tensor t = *this;
    t.data = static_cast<uint8_t*>(data) + begin * row_stride;
    t.rows = end - begin;
    return t;
  }
  // The same contiguous memory seen as rows of `new_cols` elements (e.g. [n][heads * hd] as
  // [n * heads][hd]); the tensor must be contiguous and new_cols must divide its size.
  Tensor reshaped(int64_t new_cols) const {
    Tensor t = *this;
    t.rows = rows * cols / new_cols;
    t.cols = new_cols;
    t.row_stride = tensor_row_bytes(dtype, new_cols);
    return t;
  }
  float* f32() const { return static_cast<float*>(data); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

}  // namespace hs
