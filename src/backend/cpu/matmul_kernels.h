// backend/cpu/matmul_kernels.h — internal contract between the matmul driver and its
// per-ISA kernels (scalar, *_avx2.cpp, *_avx512.cpp).
//
// Owns the quantized-activation layouts (identical at every SIMD level, so any level's
// quantizer feeds any level's kernels) and the kernel table. A tile kernel computes
// y[t][o] for a rectangle of output rows x tokens; the driver hands each thread whole
// rectangles. Cost: nothing here runs; see the kernel files.
//
// Keep this header free of inline functions: it is included by translation units compiled
// with different ISA flags, and an inline function emitted by an AVX-512 unit could be the
// copy the linker keeps for everyone.
#pragma once

#include <cstdint>

namespace hs::cpu::detail {

inline constexpr int kQ8Block = 32;    // activation block for Q4_0 ... Q8_0
inline constexpr int kQ8KBlock = 256;  // activation super-block for the K-quants
inline constexpr int kQ8KSub = 16;     // elements per bsums entry

// What a tile kernel reads. Activations are token-major with fixed strides:
//  - float weights:  x      [n_tokens][n_in]
//  - 32-wide quants: qs     [n_tokens][n_in]         int8 quants, round(x / d)
//                    d      [n_tokens][n_in / 32]    fp32 scale, amax / 127
//                    s      [n_tokens][n_in / 32]    d * sum(qs of the block)
//    "x4" variant (kernels with KernelSet::nibble_x4): the same quants, but each run of 4
//    blocks (128 elements) stored as [4 x quants 0-15][4 x quants 16-31], block by block,
//    so one 64-byte load of 4 blocks' packed nibbles matches without a cross-lane shuffle.
//    Blocks past the last multiple of 4 stay in natural order. d and s are unchanged.
//    kInt8x2 doubles the rows (see TileArgs::x2); for K-quants the two rows of a token
//    are simply treated as two tokens and the driver adds their outputs.
//  - K-quants:       qs     [n_tokens][n_in]         int8 quants
//                    d      [n_tokens][n_in / 256]   fp32 scale, amax / 127
//                    bsums  [n_tokens][n_in / 16]    sum of each 16 quants
struct TileArgs {
  const uint8_t* w = nullptr;  // [n_out][row_bytes]
  int64_t row_bytes = 0;
  int64_t n_in = 0;
  int64_t n_out = 0;
  const float* x = nullptr;
  const int8_t* qs = nullptr;
  const float* d = nullptr;
  const float* s = nullptr;
  const int16_t* bsums = nullptr;
  float* y = nullptr;  // [n_tokens][n_out]
  // kInt8x2 for the 32-wide types: each token has two activation rows (2t: q1 with scale d1,
  // 2t+1: residual q2 with scale d1/256); the kernel dots both with each unpacked weight
  // and combines 256 * dot1 + dot2 exactly in int32, scaled by the row 2t+1 scale.
  bool x2 = false;
  // True when the weight is read once per call (few tokens): the kernels then prefetch it
  // ahead from DRAM. False when tiles of many tokens re-read it from cache.
  bool stream = false;
};

// y[t][o] for o in [row_begin, row_end), t in [tok_begin, tok_end).
using TileFn = void (*)(const TileArgs& a, int64_t row_begin, int64_t row_end,
                        int64_t tok_begin, int64_t tok_end);
// One activation row x [n_in] -> qs [n_in], d [n_in/32], s [n_in/32]. Options for the two
// rows of kInt8x2: resid (if not null) receives x - d * q in fp32; parent_d (if not null)
// fixes the block scales to parent_d / 256 (exact) instead of amax / 127 and clamps the
// quants to +-127: the residual row, whose integer dot then combines exactly with the first
// row's as 256 * dot1 + dot2.
using QuantizeQ8Fn = void (*)(const float* x, int64_t n_in, int8_t* qs, float* d, float* s,
                              float* resid, const float* parent_d);
// One activation row x [n_in] -> qs [n_in], d [n_in/256], bsums [n_in/16] (options as above).
using QuantizeQ8KFn = void (*)(const float* x, int64_t n_in, int8_t* qs, float* d,
                               int16_t* bsums, float* resid, const float* parent_d);

struct KernelSet {
  QuantizeQ8Fn quantize_q8 = nullptr;
  QuantizeQ8Fn quantize_q8_x4 = nullptr;  // the "x4" layout
  bool nibble_x4 = false;  // Q4_0/Q4_1/Q5_0/Q5_1 kernels read the "x4" layout
  QuantizeQ8KFn quantize_q8k = nullptr;
  TileFn f32 = nullptr, f16 = nullptr, bf16 = nullptr;
  TileFn q4_0 = nullptr, q4_1 = nullptr, q5_0 = nullptr, q5_1 = nullptr, q8_0 = nullptr;
  TileFn q4_k = nullptr, q5_k = nullptr, q6_k = nullptr;
};

// Each fills the entries it implements and leaves the others untouched, so a level starts
// from the level below it.
void fill_kernels_scalar(KernelSet& ks);      // matmul_scalar.cpp: everything
void fill_kernels_avx2_q32(KernelSet& ks);    // matmul_q32_avx2.cpp: quantizers, 32-wide, float
void fill_kernels_avx2_qk(KernelSet& ks);     // matmul_qk_avx2.cpp: K-quants
void fill_kernels_avx512_q32(KernelSet& ks);  // matmul_q32_avx512.cpp
void fill_kernels_avx512_qk(KernelSet& ks);   // matmul_qk_avx512.cpp

}  // namespace hs::cpu::detail
