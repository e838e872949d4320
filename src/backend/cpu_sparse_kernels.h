// backend/cpu_sparse_kernels.h — the CPU backend's table of host sparse kernels
// (sparse/sparse_kernels.h): each op forwards to the SIMD kernels of backend/cpu/sketch_score.h
// and backend/cpu/attention.h. One process-wide instance (the kernels are stateless; the SIMD
// level is chosen once per process). Cost: one virtual call per op.
#pragma once

#include "sparse/sparse_kernels.h"

namespace hs {

const SparseKernels& cpu_sparse_kernels();

}  // namespace hs
