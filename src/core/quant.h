// core/quant.h — GGML quantized block layouts and their scalar reference dequantization.
//
// Owns the byte-exact block structs of the quant types hindsight reads from GGUF files
// (layouts from ggml-common.h) and reference dequantizers that reproduce ggml's
// dequantize_row_* arithmetic operation for operation: each output is the same sequence of
// float32 multiplies / subtracts / adds, so results are bitwise identical to ggml's
// reference C code and to the `gguf` Python package. (Products are kept in separate
// statements so a compiler in `-ffp-contract=on` mode cannot fuse them into FMAs.)
//
// Cost model: scalar, branch-free inner loops over whole blocks; a few ns per block
// element group, ~0.1-0.2 s for 50M elements on one core. The CPU backend's fused
// kernels use the block structs and `get_scale_min_k4` directly; these functions are the
// ground truth they are tested against, and the path for loading weights as float.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace hs {

inline constexpr int kQK = 32;    // elements per block of the 32-wide types (Q4_0 ... Q8_0)
inline constexpr int kQK_K = 256;  // elements per K-quant super-block
inline constexpr int kKScaleBytes = 12;  // packed 6-bit (scale, min) pairs of Q4_K / Q5_K

// All fp16 fields are raw IEEE half bits (see core/fp16.h). Every struct has alignment 2
// (1 for none), matching ggml; blocks are packed back to back in a tensor.

// y[j] = (nibble - 8) * d; low nibbles are elements 0..15, high nibbles 16..31.
struct BlockQ4_0 {
  uint16_t d;             // fp16 scale
  uint8_t qs[kQK / 2];    // [16] nibbles
};

// y[j] = nibble * d + m.
struct BlockQ4_1 {
  uint16_t d;             // fp16 scale
  uint16_t m;             // fp16 min
  uint8_t qs[kQK / 2];    // [16] nibbles
};

// y[j] = ((nibble | bit_j << 4) - 16) * d; bit j of the little-endian u32 in qh.
struct BlockQ5_0 {
  uint16_t d;             // fp16 scale
  uint8_t qh[4];          // [32 bits] 5th bit of each element
  uint8_t qs[kQK / 2];    // [16] low nibbles
};

// y[j] = (nibble | bit_j << 4) * d + m.
struct BlockQ5_1 {
  uint16_t d;             // fp16 scale
  uint16_t m;             // fp16 min
  uint8_t qh[4];          // [32 bits] 5th bit of each element
  uint8_t qs[kQK / 2];    // [16] low nibbles
};

// y[j] = qs[j] * d.
struct BlockQ8_0 {
  uint16_t d;             // fp16 scale
  int8_t qs[kQK];         // [32] signed quants
};

// 8 sub-blocks of 32 with 6-bit (scale, min) each. Per 64 elements: 32 bytes of qs, low
// nibbles -> sub-block 2i, high nibbles -> sub-block 2i+1. y = d*sc*q - dmin*m.
struct BlockQ4K {
  uint16_t d;                     // fp16 super-block scale for the sub-block scales
  uint16_t dmin;                  // fp16 super-block scale for the sub-block mins
  uint8_t scales[kKScaleBytes];   // [12] packed 6-bit (sc, m) x 8, see get_scale_min_k4
  uint8_t qs[kQK_K / 2];          // [128] nibbles
};

// As Q4_K plus a 5th bit: bit i of qh[l] is the high bit of element l of sub-block i.
struct BlockQ5K {
  uint16_t d;                     // fp16 super-block scale for the sub-block scales
  uint16_t dmin;                  // fp16 super-block scale for the sub-block mins
  uint8_t scales[kKScaleBytes];   // [12] packed 6-bit (sc, m) x 8
  uint8_t qh[kQK_K / 8];          // [32] high bits: bit i -> sub-block i
  uint8_t qs[kQK_K / 2];          // [128] low nibbles
};

// 16 sub-blocks of 16 with int8 scales; 6-bit quants minus 32. Per 128 elements: 64 bytes
// of ql (low nibbles -> elements 0..63 as [ql[0..31], ql[32..63]], high nibbles -> 64..127)
// and 32 bytes of qh (bit pairs 0-1, 2-3, 4-5, 6-7 -> the four groups of 32).
struct BlockQ6K {
  uint8_t ql[kQK_K / 2];          // [128] low 4 bits
  uint8_t qh[kQK_K / 4];          // [64] high 2 bits
  int8_t scales[kQK_K / 16];      // [16] signed sub-block scales
  uint16_t d;                     // fp16 super-block scale
};

static_assert(sizeof(BlockQ4_0) == 18 && alignof(BlockQ4_0) == 2);
static_assert(sizeof(BlockQ4_1) == 20 && alignof(BlockQ4_1) == 2);
static_assert(sizeof(BlockQ5_0) == 22 && alignof(BlockQ5_0) == 2);
static_assert(sizeof(BlockQ5_1) == 24 && alignof(BlockQ5_1) == 2);
static_assert(sizeof(BlockQ8_0) == 34 && alignof(BlockQ8_0) == 2);
static_assert(sizeof(BlockQ4K) == 144 && alignof(BlockQ4K) == 2);
static_assert(sizeof(BlockQ5K) == 176 && alignof(BlockQ5K) == 2);
static_assert(sizeof(BlockQ6K) == 210 && alignof(BlockQ6K) == 2);
static_assert(offsetof(BlockQ5K, qh) == 16 && offsetof(BlockQ5K, qs) == 48);
static_assert(offsetof(BlockQ6K, scales) == 192 && offsetof(BlockQ6K, d) == 208);

// Unpacks the 6-bit (scale, min) pair of sub-block j (0..7) from the 12 packed bytes of a
// Q4_K / Q5_K block. Bytes 0-3: sc[0..3] low 6 bits, bytes 4-7: m[0..3] low 6 bits; the top
// 2 bits of bytes 0-3 / 4-7 are the high bits of sc[4..7] / m[4..7], whose low nibbles are
// bytes 8-11 (low nibble: sc, high nibble: m).
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Per-type kernels: `n_blocks` consecutive blocks -> dst [n_blocks * block_elems] floats.
// Blocks must be suitably aligned (2 bytes); dequantize_row handles unaligned sources.
void dequantize_q4_0(const BlockQ4_0* x, float* dst, int64_t n_blocks);
void dequantize_q4_1(const BlockQ4_1* x, float* dst, int64_t n_blocks);
void dequantize_q5_0(const BlockQ5_0* x, float* dst, int64_t n_blocks);
void dequantize_q5_1(const BlockQ5_1* x, float* dst, int64_t n_blocks);
void dequantize_q8_0(const BlockQ8_0* x, float* dst, int64_t n_blocks);
void dequantize_q4_k(const BlockQ4K* x, float* dst, int64_t n_blocks);
void dequantize_q5_k(const BlockQ5K* x, float* dst, int64_t n_blocks);
void dequantize_q6_k(const BlockQ6K* x, float* dst, int64_t n_blocks);
// Scalar types (sources may be unaligned; read with memcpy).
void dequantize_f16(const void* src, float* dst, int64_t n_elems);   // src: [n] fp16 bits
void dequantize_bf16(const void* src, float* dst, int64_t n_elems);  // src: [n] bf16 bits

// Dequantizes n_elems elements of `type` from src (src_bytes readable bytes; extra bytes
// are ignored) into dst [n_elems]. Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q5_K, Q6_K. Errors: kInvalidArgument when n_elems is negative or not a multiple of
// the block size, kCorrupt when src_bytes is too small, kUnsupported for other types.
Status dequantize_row(DType type, const void* src, size_t src_bytes, float* dst,
                      int64_t n_elems);

// True when dequantize_row supports `type`.
bool dequantize_supported(DType type);

}  // namespace hs
