// backend/cuda/gemv_kernels.h — launchers of the decode GEMV kernels (gemv.cu): quantized
// (Q4_0 / Q8_0 / Q4_K in quant_layout.h's device layout, dequantized in registers) and
// 16-bit (f16 / bf16) weights times up to kMaxGemvRows f32 activation rows, plus the
// quantized embedding gather and the whole-matrix dequantization to f16 for large batches.
//
// The seam between the C++20 backend and nvcc (like kernels.h): plain structs, C++17, only
// <cuda_runtime_api.h>. Every launcher enqueues on `s`, launches nothing for an empty shape,
// returns cudaErrorInvalidValue for a shape it cannot run, and otherwise cudaGetLastError()
// after its launches.
//
// GEMV numerics (y[t][r] = sum_c W[r][c] * x[t][c]): the weights enter the tensor cores exactly
// (4/8-bit quants and f16 / bf16 values are exact in f16 / bf16); the block scales d, d*sc and
// dmin*m (exact fp32 products, as ggml's) are applied in fp32 to each 32-column partial sum,
// Q4_K's mins through the per-sub-block sums of x. x is split into exact-sum terms of the
// weight's 16-bit type: f16 hi + lo after a per-token power-of-two scaling of each CTA's column
// slice (max |x| -> [2^14, 2^15), undone exactly at the end, so neither f16's range nor its
// subnormals limit x), bf16 hi + mid + lo for bf16 weights. The split loses at most ~2^-22
// (f16) / 2^-24 (bf16) of each |x|; products are exact and sums are fp32 (tensor-core fp32
// accumulation over <= 16 products per step, FFMA / FADD across 32-column blocks, fixed-order
// sums across warps and across the CTAs of a cluster). Results are deterministic for a given
// shape, plan and x.rows; the error is ~1e-7 of sum_c |W||x| (host emulation of the kernels:
// <= 5e-8 with exact mma sums), the tests allow 1e-5. A non-finite x gives NaN outputs for
// its token. Same as ggml's dequantize + fp32 dot product up to summation order.
// Cost: every weight byte is read once per call for all x rows (one pass); x is read twice
// per CTA from L2 (4 bytes per element and token, 6 for bf16 weights, per 32..256 rows).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"

namespace hs::cuda {

constexpr int kMaxGemvRows = 8;

// How a GEMV launch is cut (plan_gemv picks one; tests and benchmarks may force another).
// A CTA of 8 warps takes 32 * rw weight rows and one slice of `slice_groups` column groups;
// its rw row-warps x (8 / rw) k-warps split them (each warp: 32 rows, every (8/rw)-th group).
// ck > 1: the ck slices of a row block run as one thread-block cluster and are summed
// through distributed shared memory (no atomics, fixed order).
struct GemvPlan {
  int rw = 1;                // 1, 2, 4 or 8
  int ck = 1;                // 1..8 CTAs per cluster along the columns
  int64_t slice_groups = 0;  // column groups per CTA (>= 1); ck * slice_groups >= groups
  size_t smem_bytes = 0;     // dynamic shared memory of one CTA
};
// Weight kinds of the GEMV kernels (the quant kinds, then the 16-bit ones).
enum class GemvWeights : int { kQ4_0 = 0, kQ8_0 = 1, kQ4_K = 2, kF16 = 3, kBF16 = 4 };
// n_sm: the device's multiprocessor count. Returns slice_groups == 0 when the shape cannot
// run (n_tok outside 1..8, or x too large for shared memory even at ck = 8).
GemvPlan plan_gemv(GemvWeights w, int64_t rows, int64_t cols, int n_tok, int n_sm);
// Columns per group of `w` (128 Q4_0 / Q4_K, 64 Q8_0, 32 f16 / bf16) and the dynamic shared
// memory of a CTA with slice_groups groups (x staged as 4 bytes per column and token, 6 for
// bf16, plus Q4_K's sub-block sums; at least the 8 KB of epilogue partials).
int64_t gemv_group_cols(GemvWeights w);
size_t gemv_smem_bytes(GemvWeights w, int64_t slice_groups, int n_tok);

// y [x.rows][rows] (strided Rows, y.cols == rows) = W x^T for x [x.rows][cols] f32 (strided,
// x.cols == cols, 1 <= x.rows <= kMaxGemvRows). w: [rows] device rows of w_row_bytes bytes
// each (>= quant_device_row_bytes(k, cols), a multiple of 16; w 16-byte aligned); cols a
// multiple of the block size. plan: null = plan_gemv for the current device.
cudaError_t launch_gemv_quant(QuantKind k, const uint8_t* w, int64_t rows, int64_t cols, int64_t w_row_bytes,
                              CRows x, Rows y, cudaStream_t s, const GemvPlan* plan = nullptr);

// The same for f16 (bf16 = false) or bf16 weights w [rows][cols] (bits), rows w_stride_elems
// elements apart (a multiple of 8; w 16-byte aligned); cols a multiple of 8.
cudaError_t launch_gemv16(bool bf16, const uint16_t* w, int64_t rows, int64_t cols, int64_t w_stride_elems, CRows x,
                          Rows y, cudaStream_t s, const GemvPlan* plan = nullptr);

// Batch 1 or 2 of 16-bit weights (gemv_warp.cu): a persistent grid (one CTA of 16 warps per
// SM) streams the weight rows with 16-byte loads kept two steps ahead of the arithmetic (8 KB in
// flight per warp), each warp taking 1 or 2 whole rows at a time; x (f32) is staged once per CTA
// in shared memory (through L1 when it does not fit); CUDA-core FMAs on exactly widened weights.
// Numerics: fp32 FMA per lane in column order, then a fixed butterfly over the 32 lanes: the
// only rounding is fp32 accumulation, deterministic for a given shape (independent of the grid,
// the rows per warp and the other weights of a multi launch). Same operands as launch_gemv16
// with x.rows <= kMaxGemvWarpRows; also needs x 16-byte aligned with a stride of a multiple of 4
// floats (cudaErrorInvalidValue, nothing launched, otherwise: the caller falls back).
constexpr int kMaxGemvWarpRows = 2;
cudaError_t launch_gemv16_warp(bool bf16, const uint16_t* w, int64_t rows, int64_t cols, int64_t w_stride_elems,
                               CRows x, Rows y, cudaStream_t s);

// How a warp GEMV launch is cut (tests and benchmarks; null = the launcher's choice).
struct GemvWarpConfig {
  int rows_per_warp = 0;  // 0: pick (fewest rows per warp on the busiest warp, 2 on a near tie); 1 or 2
  int x_smem = -1;        // -1: shared memory when x fits (NT * cols * 4 bytes <= the opt-in limit); 0: L1; 1: shared
  int ctas = 0;           // 0: one per SM; otherwise that many (persistent: each warp loops over its rows)
  // Programmatic dependent launch: the grid may start while the previous kernel of the stream
  // runs; it loads its first weights, then waits (griddepcontrol.wait) before reading x or
  // writing y. Only for weights that no kernel still in flight on the stream writes.
  bool pdl = false;
};

// Up to kMaxGemvWarpWeights weights sharing x in one launch (q/k/v, gate/up): y[i] [x.rows][rows[i]]
// = W_i x^T for W_i = w[i] [rows[i]][cols] (rows w_stride_elems[i] apart; each as launch_gemv16_warp
// requires; rows[i] may be 0). The weights' rows are one flattened list of tasks cut over the
// grid; each y[i] is computed exactly as launch_gemv16_warp would compute it alone. The small
// arrays travel by value in the kernel arguments (graph-capturable).
constexpr int kMaxGemvWarpWeights = 3;
cudaError_t launch_gemv16_warp_multi(bool bf16, int n_weights, const uint16_t* const* w, const int64_t* rows,
                                     int64_t cols, const int64_t* w_stride_elems, CRows x, const Rows* y,
                                     cudaStream_t s, const GemvWarpConfig* cfg = nullptr);

// out_f16 [rows][cols] dense (16-byte aligned) = the dequantized matrix rounded to f16
// (nearest even), values clamped to +-65504 (NaN stays NaN). Bandwidth-bound: one thread per
// 32-column block, 16-byte stores.
cudaError_t launch_dequantize_quant(QuantKind k, const uint8_t* w, int64_t rows, int64_t cols, int64_t w_row_bytes,
                                    uint16_t* out_f16, cudaStream_t s);

// out[i][:] = dequantized row tokens[i] (f32, bitwise hs::dequantize_row); tokens: [out.rows]
// device ids in [0, rows) (validated by the caller), out.cols == cols.
cudaError_t launch_embedding_quant(QuantKind k, const uint8_t* w, int64_t cols, int64_t w_row_bytes,
                                   const int32_t* tokens, Rows out, cudaStream_t s);

}  // namespace hs::cuda
