// backend/cuda/bias_kernel.h — launcher of the bias kernel (bias.cu; internal to backend/cuda).
//
// The seam between nvcc (C++17) and the host C++20 of cuda_bias.cpp, as kernels.h is for the
// other kernels: plain structs and pointers, only <cuda_runtime_api.h>. The launcher enqueues
// on `s`, launches nothing for an empty shape and returns cudaGetLastError().
// Cost: one read and one write of each element of x; the bias row stays in L1/L2.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace hs::cuda {

// x[r][c] += bias[c]; bias: [x.cols] f32 in device memory.
cudaError_t launch_add_bias(Rows x, const float* bias, cudaStream_t s);

}  // namespace hs::cuda
