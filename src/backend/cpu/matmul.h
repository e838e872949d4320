// backend/cpu/matmul.h — matrix products directly on GGUF weights (quantized or float).
//
// Owns the CPU backend's `matmul` (y = x · Wᵀ for a weight stored in ggml order) and
// `get_rows` (embedding lookup). Quantized weights are never dequantized to memory: the
// activation rows are quantized once per call (8-bit, blocks of 32 for the 32-wide types,
// blocks of 256 with 16-element sums for the K-quants, as llama.cpp does), and every output
// is an integer dot product of weight and activation blocks, scaled in fp32. Float weights
// (F32, F16, BF16) are dotted with the fp32 activations directly.
//
// Cost model: a matvec (n_tokens = 1) streams the weight once, so it is bound by memory
// bandwidth or by the integer-dot throughput, whichever is lower; the SIMD level is chosen
// once per process (AVX-512 VNNI > AVX2 > scalar, or HS_SIMD=scalar|avx2|avx512). Output
// rows are split over the pool's threads; for n_tokens > 1 each pass over a weight row
// serves a tile of several tokens, so the weight is read from memory once per call and from
// cache once per token tile. Activation quantization costs O(n_tokens · n_in).
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "core/weight_view.h"

namespace hs::cpu {

using hs::WeightView;  // core/weight_view.h

// How fp32 activations enter the integer dot products with quantized weights.
//  kInt8:   one 8-bit quantization per activation block (llama.cpp's scheme). Per element
//           error <= amax / 254 of its block: enough to flip near-tied top-1 tokens of a
//           small model (SmolLM2-135M: KL 0.0022 against transformers, 45/1429 top-1 flips).
//  kInt8x2: two 8-bit terms, x ~ d1 q1 + d2 q2 with q2 the residual x - d1 q1 quantized
//           at d2 = d1 / 256: error <= amax / 32512 (~16-bit), for a second integer dot
//           per unpacked weight (weights are still read once). Matches transformers on
//           both default models (KL 0.000000, all top-1 equal); matvec from DRAM ~5-10%
//           slower than kInt8, prefill 20% (32-wide types) to 75% (K-quants) slower.
// Float weights (F32/F16/BF16) always use the fp32 activations.
enum class ActPrecision { kInt8 = 0, kInt8x2 = 1 };

// The precision of the calls that do not name one: set_default_act_precision, else
// HS_MATMUL_PRECISION=int8|int8x2, else kInt8x2.
ActPrecision default_act_precision();
void set_default_act_precision(ActPrecision precision);
const char* act_precision_name(ActPrecision precision);  // "int8" / "int8x2"

// y[t][o] = sum_i W[o][i] * x[t][i].  x: [n_tokens][n_in] f32, y: [n_tokens][n_out] f32.
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
// Errors: kUnsupported (other types, named), kInvalidArgument (shape not a multiple of the
// type's block, negative sizes, null pointers). x and y must not overlap.
Status matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);
Status matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
              ActPrecision precision);

// Several weights reading the same input (q/k/v, gate/up): ys[i] = x · ws[i]ᵀ, each
// [n_tokens][ws[i].n_out]. All ws[i] need the same n_in (types may differ); 1..8 weights.
// x is quantized once per activation format and all rows run in one pool dispatch, which
// saves the per-call overhead (~2-3 us for a small matvec) that decode pays 7 times a layer.
Status matmul_multi(std::span<const WeightView> ws, const float* x, int64_t n_tokens,
                    std::span<float* const> ys, ThreadPool& pool);
Status matmul_multi(std::span<const WeightView> ws, const float* x, int64_t n_tokens,
                    std::span<float* const> ys, ThreadPool& pool, ActPrecision precision);

// out[t][:] = dequant(W[ids[t]][:]) exactly (bitwise equal to hs::dequantize_row).
// out: [n_ids][n_in]. Errors as matmul, plus kInvalidArgument for an id outside [0, n_out).
Status get_rows(const WeightView& w, const int32_t* ids, int64_t n_ids, float* out);

// "avx512", "avx2" or "scalar": the level dispatch picked for this process.
const char* simd_level();

// ---- explicit SIMD levels (tests, benchmarks, comparisons) ----

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* simd_level_name(SimdLevel level);
// True when this CPU (and this build) can run `level`.
bool simd_level_available(SimdLevel level);
// The level `matmul` uses: HS_SIMD if set (clamped to what the CPU has, with a warning on
// stderr), else the best available.
SimdLevel active_simd_level();
// matmul at an explicit level; kUnsupported when the level is not available here.
Status matmul_at(SimdLevel level, const WeightView& w, const float* x, int64_t n_tokens,
                 float* y, ThreadPool& pool, ActPrecision precision = default_act_precision());

// Bytes of one weight row (n_in elements of `type`); 0 for types without a block layout.
int64_t weight_row_bytes(DType type, int64_t n_in);

}  // namespace hs::cpu
