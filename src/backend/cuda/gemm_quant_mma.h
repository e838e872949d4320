// backend/cuda/gemm_quant_mma.h — the matmul of quantized weights (Q4_0 / Q8_0 / Q4_K in
// quant_layout.h's device layout) for batches of 5..kMaxGemmQuantTokens token rows on tensor
// cores (gemm_quant_mma.cu): every weight byte streams from HBM once per 32 tokens, is decoded
// to f16 in registers and multiplied on mma.sync.m16n8k16 — no f16 copy of the weight.
//
// Why: above the GEMV kernels' 8 rows the backend used to dequantize the whole weight to f16
// (2 bytes written and read again per weight, 3.6x a Q4_0 weight's bytes) before cuBLAS: on the
// Qwen3.5-27B shape at 32 tokens a 17408 x 5120 Q4_0 projection took 520 us (~190 GB/s of Q4_0;
// docs/benchmarks.md, session 24) where reading it once takes ~35 us.
//
// Shape: a CTA of 4 warps takes 128 weight rows (32 a warp: two m16 tiles, lane rows g, g + 8,
// g + 16, g + 24 as the layout's 16-byte lane loads give them) and up to 32 tokens (1..4 n8
// tiles); more tokens take more CTAs along z (each re-reads the weights). The columns are cut
// into chunks of 128; x (the f16 copy of the activations) is staged a chunk at a time in shared
// memory (cp.async, 3 chunks ahead in a ring of 4, one barrier a chunk) and shared by the 4
// warps, while each warp keeps its next 2-3 chunks' weights in flight in registers. ck > 1 CTAs of one thread-block cluster split the
// chunks of a row block and add their partial sums through distributed shared memory in a fixed
// order (deterministic, no atomics).
// Numerics: the weights as f16 — Q4_0 / Q8_0 round((q - 8) d) / round(q d) exactly as the
// dequantize-to-f16 path rounds them; Q4_K q * f16(d sc) - f16(dmin m) in one f16 FMA — times
// x as f16, fp32 accumulation: the cuBLAS path's numerics (tests: 1e-2 relative norm).
// Limits (cudaErrorInvalidValue, nothing launched): 1 <= n_tok <= kMaxGemmQuantTokens, cols a
// multiple of the block size, x16 16-byte aligned with x_stride a multiple of 8 elements, w rows
// a multiple of 16 bytes apart.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"

namespace hs::cuda {

constexpr int kMaxGemmQuantTokens = 128;
constexpr int kMaxGemmQuantWeights = 4;

// How a launch is cut (the launcher's planner picks one; tests may force another).
struct GemmQuantPlan {
  int n_tiles = 0;       // n8 token tiles per CTA (1..4)
  int token_blocks = 0;  // CTAs along z, each 8 * n_tiles tokens
  int ck = 0;            // 1..8 CTAs of a cluster along the columns
  int slice_chunks = 0;  // 128-column chunks per CTA
};
// n_sm: the device's multiprocessor count. A plan with ck == 0 means the shape cannot run.
GemmQuantPlan plan_gemm_quant(QuantKind k, int64_t rows, int64_t cols, int n_tok, int n_sm);
// The same over a launch's row blocks of 128 rows (the sum over its weights).
GemmQuantPlan plan_gemm_quant_blocks(QuantKind k, int64_t row_blocks, int64_t cols, int n_tok, int n_sm);

// y [n_tok][rows] (strided) = x16 · Wᵀ for W = w [rows] device rows (w_row_bytes apart) of
// `cols` columns and x16 [n_tok][cols] f16 (x_stride elements apart). pdl: launched as a
// programmatic dependent of the previous kernel on `s` (its first weights are requested before
// it waits; pdl.cuh). plan: null = plan_gemm_quant for the current device.
// warp_small (with no plan): up to 8 tokens take the barrier-free variant instead (8 warps a CTA,
// each streaming its rows' chunks with its x fragments from L1, no staging; session 24). The
// backend uses it by default (cuda_backend.h: faster inside a replayed step, session 25).
cudaError_t launch_gemm_quant_mma(QuantKind k, const uint8_t* w, int64_t rows, int64_t cols, int64_t w_row_bytes,
                                  const uint16_t* x16, int64_t x_stride, int n_tok, Rows y, cudaStream_t s,
                                  bool pdl = false, const GemmQuantPlan* plan = nullptr, bool warp_small = false);

// One weight of a multi launch: w [rows] device rows row_bytes apart, into y [n_tok][rows].
struct GemmQuantOut {
  const uint8_t* w = nullptr;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  Rows y;
};
// Up to kMaxGemmQuantWeights weights of one kind and `cols` sharing x in one launch (q/k/v,
// gate/up, a Gated-DeltaNet layer's qkv / z / beta / alpha): their row blocks are one list cut
// over the grid, so small weights (48-row gates) ride along instead of taking a launch each.
// A weight may have 0 rows. Each y[i] is computed as a single launch with the same plan would.
cudaError_t launch_gemm_quant_mma_multi(QuantKind k, int n_weights, const GemmQuantOut* outs, int64_t cols,
                                        const uint16_t* x16, int64_t x_stride, int n_tok, cudaStream_t s,
                                        bool pdl = false, const GemmQuantPlan* plan = nullptr,
                                        bool warp_small = false);

}  // namespace hs::cuda
