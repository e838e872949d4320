// backend/cuda/bias.cu — x[r][c] += bias[c] (the q/k/v projection biases of qwen2).
//
// A 2-D grid as elementwise.cu's: x over columns, y over rows, both grid-strided, so any
// strided [rows][cols] view is covered. One plain f32 add per element, as the CPU's
// cpu::add_inplace: the two backends agree bit for bit.
// Cost: memory-bound, one read and one write of each element of x; the bias row is read once
// per row block from L1/L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/bias_kernel.h"

namespace hs::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridX = 1024;   // column blocks (grid-strided beyond)
constexpr int64_t kMaxGridY = 65535;  // row blocks (grid-strided beyond)

__global__ void add_bias_kernel(Rows x, const float* __restrict__ bias) {
  for (int64_t r = blockIdx.y; r < x.rows; r += gridDim.y)
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < x.cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x)
      x.p[r * x.stride + c] += bias[c];
}

}  // namespace

cudaError_t launch_add_bias(Rows x, const float* bias, cudaStream_t s) {
  if (x.rows <= 0 || x.cols <= 0) return cudaSuccess;
  const int64_t gx = std::min<int64_t>(kMaxGridX, (x.cols + kThreads - 1) / kThreads);
  const int64_t gy = std::min<int64_t>(kMaxGridY, x.rows);
  add_bias_kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), 1), kThreads, 0, s>>>(x, bias);
  return cudaGetLastError();
}

}  // namespace hs::cuda
