// backend/cpu/matmul_exact.h — matmul with float32 activations (no activation quantization).
//
// The precise path: weight rows are dequantized to float32 in L1-sized pieces by SIMD
// dequantizers and dotted with the float32 activations using FMAs, so results differ from
// a float64 reference only by float32 rounding (transformers-level agreement). The 8-bit
// activation path in matmul.h is faster for large prefills but moves logits by ~0.1
// (docs/cpu-engine.md, "Matmul precision"); the decoder uses this path by default.
// Cost: per call, each weight element is dequantized once per token tile (64 tokens) and
// costs one FMA per token; decode is bound by weight bytes (memory), prefill by FMAs.
#pragma once

#include <cstdint>

#include "backend/cpu/matmul.h"

namespace hs::cpu {

// y[t][o] = sum_i W[o][i] * x[t][i]. x: [n_tokens][n_in] f32, y: [n_tokens][n_out] f32.
// Same types and errors as cpu::matmul.
Status matmul_exact(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// The SIMD level matmul_exact dispatched to ("avx512", "avx2", "scalar"; HS_SIMD overrides).
const char* matmul_exact_simd_level();

namespace detail {
// Dequantize `n_blocks` consecutive blocks (row piece) to float: the per-ISA kernels
// (exposed for tests). `src` points at the first block.
void dequant_blocks_for_test(DType type, const void* src, int64_t n_elems, float* dst);
}  // namespace detail

}  // namespace hs::cpu
