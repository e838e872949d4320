// backend/cuda/gemv_quant_warp.h — the batch-1/2 GEMV on quantized weights (Q4_0 / Q8_0 / Q4_K in
// quant_layout.h's device layout) with integer dot products: launch_gemv_quant_warp
// (gemv_quant_warp.cu).
//
// Owns the decode path where a whole matrix is streamed for one or two activation rows. Two
// kernels per call, both on `s`, graph-capturable (no allocation, no host sync):
//  1. quantize x (f32, any stride / alignment) per 32 columns to int16 with an f32 scale
//     (x ~ dx * q, |q| <= 32767) into `scratch`, in the order the main kernel's lanes read it
//     (16-byte, coalesced, L1-resident);
//  2. the main kernel: every warp owns 1, 2 or 4 weight rows, each lane streams 16-byte loads
//     of the rows' quants (ld.global.nc.L1::no_allocate, 8 in flight) and dots them with the
//     int16 x through dp2a (IDP.2A: 2 int16 x int8 products a lane), the block scales applied
//     in fp32 per 8-column part. It is launched with programmatic dependent launch: its first
//     weight loads are issued while kernel 1 still runs, x is read after griddepcontrol.wait.
// Plain C++17 with <cuda_runtime_api.h> (the nvcc / C++20 seam, as kernels.h).
//
// Numerics: y is the exact dot product of the GGUF weights (as hs::dequantize_row; Q4_K's
// d*sc*q - dmin*m without ggml's rounding of the difference) with the quantized x, in fp32:
//   |y - sum_c W[c] x[c]| <= sum_c |W[c]| * 0.505 * amax_b(c) / 32767          (x quantization)
//                            + (m + 8) * 2^-24 * sum_c A[c] (|x[c]| + e[c])    (fp32, worst case)
// amax_b(c) = max(max |x| over c's 32-column block, 2^-100), e[c] the first term's per-column
// factor, A = |W| (Q4_0, Q8_0) or |d sc q| + |dmin m| (Q4_K), m = the accumulations of one lane:
// 4 ceil(cols / 1024) Q4_0, 5 ceil(cols / 1024) Q4_K, 2 ceil(cols / 512) Q8_0. The first term is
// 1.54e-5 (2^-16) of sum |W| amax_b: ~2^-15 .. 2^-16 of sum |W||x| for activations without
// extreme outliers; the random errors observed are 2e-6 .. 1.5e-5 of sum |W||x| (N(0,1) x with
// 1 % x20 outliers, 256 .. 14336 columns), the tests check the bound. Scale-invariant for
// 2^-100 <= amax_b and |x| < 2^119; a non-finite x gives NaN outputs for its token (as
// launch_gemv_quant). Deterministic for a given shape, plan rows_per_warp and x.rows.
// Cost: one read of the weights (the only DRAM traffic that scales with rows); x: 2.1-2.75 bytes
// of scratch per column and token, written once, read by every warp from L1; 2 launches.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"

namespace hs::cuda {

// Activation rows (tokens) launch_gemv_quant_warp takes: Q4_0 / Q8_0 up to 8 (run as launches of
// up to kMaxQuantWarpTokens tokens, 3 padded to 4), Q4_K up to 2 (it spills at 4).
constexpr int kMaxQuantWarpRows = 8;
constexpr int kMaxQuantWarpTokens = 4;
// Rows whose x records a norm / GLU kernel may write beside its output (outq, the early-records
// path): the one-launch layouts of 1 and 2 tokens.
constexpr int kMaxQuantWarpRecordRows = 2;
// Whether launch_gemv_quant_warp takes n_tok tokens of kind k.
constexpr bool quant_warp_takes(QuantKind k, int n_tok) {
  return n_tok >= 1 && n_tok <= (k == QuantKind::kQ4_K ? 2 : kMaxQuantWarpRows);
}
// Weights sharing x that one launch_gemv_quant_warp_multi takes (q / k / v; a Gated-DeltaNet
// layer's qkv / z / beta / alpha).
constexpr int kMaxQuantWarpWeights = 4;

// How a launch is cut (plan_gemv_quant_warp picks one; tests / benchmarks may force another).
// rows_per_warp: weight rows a warp owns (1, 2 or 4; they share every x load);
// warps_per_cta: 1, 2, 4 or 8;
// pdl: launch the main kernel as a programmatic dependent of the quantize kernel (its weight
//   loads start before x is ready);
// pdl_x: also launch the quantize kernel as a programmatic dependent of whatever precedes it on
//   the stream (it waits for that grid's completion before reading x; saves part of one launch
//   gap when the predecessor is a kernel). Off by default; only valid when the weights are not
//   written by that predecessor (the main kernel's early weight loads could then race it).
struct QuantWarpPlan {
  int rows_per_warp = 2;
  int warps_per_cta = 4;
  bool pdl = true;
  bool pdl_x = false;
  // CTAs of 256 threads an SM the kernel is compiled for (__launch_bounds__'s minimum): 2 (up
  // to 128 registers a thread) or 3 (85: one token only), i.e. 16 or 24 resident warps an SM.
  int min_ctas_per_sm = 2;
  // One token only: the main loop software-pipelined (trip i + 1's weight loads issued before
  // trip i is computed; the same registers: two buffers of half the u-steps).
  bool pipelined = false;
};
// n_tok in 1..kMaxQuantWarpRows, n_sm: the device's multiprocessor count.
QuantWarpPlan plan_gemv_quant_warp(QuantKind k, int64_t rows, int64_t cols, int n_tok, int n_sm);

// Device scratch bytes for x of n_rows tokens of `cols` columns, any kind (a multiple of 256).
size_t gemv_quant_warp_scratch_bytes(int64_t cols, int n_rows);

// y [x.rows][rows] (strided Rows, y.cols == rows) = W x^T for x [x.rows][cols] f32 (strided,
// x.cols == cols, 1 <= x.rows <= kMaxQuantWarpRows, any alignment). w: [rows] device rows of
// w_row_bytes bytes (>= quant_device_row_bytes(k, cols), a multiple of 16; w 16-byte aligned);
// cols a multiple of the block size and <= 2^24. scratch: >= gemv_quant_warp_scratch_bytes(cols,
// x.rows) bytes of device memory, 16-byte aligned, not used by anything else until the launch
// completes (stream order). Returns cudaErrorInvalidValue, launching nothing, for a shape or
// operand it does not take; cudaSuccess without launching for rows == 0 or x.rows == 0.
// plan: null = plan_gemv_quant_warp for the current device.
// x_ready: `scratch` already holds x's records for this kind, cols and x.rows, written by the op
// that made x (an OutQ of kernels.h: rms_norm / add_rms_norm / glu); the quantize kernel is not
// launched and the main kernel runs as a programmatic dependent of that op (x is read after its
// griddepcontrol.wait). The caller guarantees the records are x's (CudaBackend's input tags).
cudaError_t launch_gemv_quant_warp(QuantKind k, const uint8_t* w, int64_t rows, int64_t cols, int64_t w_row_bytes,
                                   CRows x, Rows y, void* scratch, cudaStream_t s,
                                   const QuantWarpPlan* plan = nullptr, bool x_ready = false);

// One weight of launch_gemv_quant_warp_multi: w [rows] device rows, y [x.rows][rows] (strided).
struct QuantWarpOut {
  const uint8_t* w = nullptr;
  int64_t rows = 0;
  Rows y;
};

// y_i = W_i x^T for n_w (1..kMaxQuantWarpWeights) weights of one kind and column count sharing x:
// x is quantized once and one main launch runs over all the weights' rows (the planner sees
// their total, so small k / v matrices ride with q instead of each being latency-bound). Same
// operand rules as launch_gemv_quant_warp for each weight (same w_row_bytes for all); a weight of
// 0 rows is skipped.
cudaError_t launch_gemv_quant_warp_multi(QuantKind k, int n_w, const QuantWarpOut* outs, int64_t cols,
                                         int64_t w_row_bytes, CRows x, void* scratch, cudaStream_t s,
                                         const QuantWarpPlan* plan = nullptr, bool x_ready = false);

// x [rows][cols] f32 -> its records in `scratch` (>= gemv_quant_warp_scratch_bytes), as the
// launches above write them: what a test compares an op's OutQ records with.
cudaError_t launch_quantize_x_records(QuantKind k, CRows x, void* scratch, cudaStream_t s);

}  // namespace hs::cuda
