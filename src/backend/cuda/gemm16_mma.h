// backend/cuda/gemm16_mma.h — the decode GEMM of 16-bit weights for 1..8 token rows on tensor
// cores (gemm16_mma.cu): the weights stream once from HBM straight into mma.sync fragments.
//
// Why: at 3–8 rows cuBLAS reaches only 1.2–1.5 TB/s on the 4096-row projections of an 8B model
// (too few output tiles for 132 SMs) and needs a split copy after a fused q/k/v GEMM. Here a CTA
// takes 32 weight rows, its warps split the columns (2–16 warps, so every shape keeps ~16 warps
// per SM streaming), each warp feeds 16-byte weight loads four steps ahead into
// mma.m16n8k16 (the 8 token rows are the n = 8 side), and the warps' partial sums are added in
// shared memory in a fixed order: deterministic, no atomics, no second launch.
// Numerics: x is the 16-bit copy of the activations (as the cuBLAS path uses); products exact,
// fp32 accumulation (tensor-core order inside a 16-column step, then column order per warp,
// then warp order). Up to kMaxGemm16MmaWeights weights sharing x in one launch, each into its
// own y (q/k/v, gate/up).
// Limits (cudaErrorInvalidValue, nothing launched, otherwise): 1 <= n_tok <= 8, cols a multiple
// of 32, weight strides a multiple of 8 elements, w and x 16-byte aligned.
// Cost: one pass over the weights; x (n_tok × cols × 2 bytes) read from L2 by every CTA.
// Measured on the H200 against cuBLAS (docs/benchmarks.md): ahead where the weight has few
// 32-row tiles for the SMs (4096 × 4096: 3.4 vs 1.8 TB/s), behind on the large gate/up.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace hs::cuda {

constexpr int kMaxGemm16MmaTokens = 8;
constexpr int kMaxGemm16MmaWeights = 3;

// Load schemes (bytes per lane and row per step x steps in flight), for tests and benchmarks;
// -1 = the default (0). Schemes with 32-byte steps fall back to 0 when cols % 64 != 0.
constexpr int kGemm16MmaVariants = 4;
const char* gemm16_mma_variant_name(int variant);
// The CTAs (32-row tiles) a launch over these weights has: the caller's cuBLAS-or-this choice.
int64_t gemm16_mma_tiles(const int64_t* rows, int n_weights);

// y[i] [n_tok][rows[i]] = x16 · W_iᵀ for W_i = w[i] [rows[i]][cols] (f16 or bf16 bits, rows
// w_stride[i] elements apart), x16 [n_tok][cols] dense in the weights' type. warps: 0 = pick
// (tests may force 1..16). pdl: launched as a programmatic dependent of the previous kernel on
// `s` (its first weights are prefetched into L2 before it waits for that kernel; pdl.cuh).
cudaError_t launch_gemm16_mma(bool bf16, int n_weights, const uint16_t* const* w, const int64_t* rows, int64_t cols,
                              const int64_t* w_stride, const uint16_t* x16, int n_tok, const Rows* y, cudaStream_t s,
                              int warps = 0, int variant = -1, bool pdl = false);

}  // namespace hs::cuda
