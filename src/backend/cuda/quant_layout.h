// backend/cuda/quant_layout.h — the device layout of quantized GGUF weights (Q4_0, Q8_0, Q4_K).
//
// Owns how one row of GGUF blocks is repacked for the GPU so that the GEMV kernels
// (gemv.cu) read every weight byte once with 16-byte, coalesced loads and can feed the
// 4-bit / 8-bit quants straight into tensor-core fragments. The values are unchanged: the
// repack only moves bytes (and, for Q4_K, unpacks the 6-bit (scale, min) pairs into bytes),
// so dequantizing a device row gives exactly hs::dequantize_row's floats
// (quant_dequantize_device_row is that reference, used by the tests).
// Plain C++17 (no CUDA headers): gemv.cu (nvcc, C++17) includes it for the offsets.
// Cost: one pass over the row on the host; device bytes / GGUF bytes = 1.00 (Q4_0, Q8_0 with
// cols a multiple of 128 / 64), 1.028 (Q4_K); short rows pay up to one group of padding
// (e.g. Q4_0 with 576 cols: 1.14).
//
// Every row is a sequence of *groups*; a group is what one quad of lanes (t = 0..3) of the
// GEMV kernel reads from one row with one 16-byte load each: 64 bytes of quants.
//
// Q4_0 (group = 4 blocks = 128 columns; G = ceil(cols / 128) groups, blocks past cols/32 are
// zero padding with d = 0):
//   [0, 64 G)         quants. Group g, lane t, block j (0..3), byte i (0..3) at
//                     64 g + 16 t + 4 j + i  =  GGUF qs[4 t + i] of block 4 g + j,
//                     i.e. low nibble = element 4t+i, high nibble = element 16+4t+i.
//   [64 G, 72 G)      d (fp16) of block b at 64 G + 2 b (8 bytes per group).
//   row bytes = round_up(72 G, 16).
// Q8_0 (group = 2 blocks = 64 columns; G = ceil(cols / 64)):
//   [0, 64 G)         quants. Group g, lane t, block j (0..1), half h (0..1), byte i at
//                     64 g + 16 t + 8 j + 4 h + i  =  GGUF qs[16 h + 4 t + i] of block 2 g + j.
//   [64 G, 68 G)      d (fp16) of block b at 64 G + 2 b.
//   row bytes = round_up(68 G, 16).
// Q4_K (group = half a super-block = 4 sub-blocks of 32 = 128 columns; S = cols / 256
// super-blocks, G = 2 S):
//   [0, 64 G)         quants of sub-block b = 8 s + k (s: super-block, k: 0..7) in Q4_0's
//                     order: nibble-block byte l = q[l] | q[16 + l] << 4 (q: the sub-block's
//                     32 4-bit quants), then interleaved exactly as Q4_0 (group g holds
//                     sub-blocks 4g .. 4g+3).
//   [64 G, 72 G)      per group g (sub-blocks 4g + j, j = 0..3): bytes sc[j] at 64 G + 8 g + j
//                     and m[j] at 64 G + 8 g + 4 + j (the unpacked 6-bit scales and mins).
//   [72 G, 72 G + 4 S) per super-block s: d (fp16) at 72 G + 4 s, dmin (fp16) at + 2.
//   row bytes = round_up(72 G + 4 S, 16) = round_up(148 S, 16).
// Values: Q4_0 (q - 8) * d; Q8_0 q * d; Q4_K (d * sc) * q - dmin * m, each product rounded to
// float once, as ggml.
#pragma once

#include <cstdint>

namespace hs::cuda {

enum class QuantKind : int { kQ4_0 = 0, kQ8_0 = 1, kQ4_K = 2 };

// Where the pieces of one device row are (bytes from the row start).
struct QuantRowLayout {
  int64_t groups = 0;        // G
  int64_t group_cols = 0;    // columns per group (128, 64, 128)
  int64_t blocks = 0;        // scale units per row incl. padding (32 columns each): 4 G, 2 G, 4 G
  int64_t scale_offset = 0;  // 64 G: fp16 d (Q4_0, Q8_0) or sc/m bytes (Q4_K)
  int64_t dm_offset = 0;     // Q4_K: 72 G, the (d, dmin) pairs; 0 otherwise
  int64_t row_bytes = 0;     // multiple of 16
};

// Columns per GGUF block of `k` (32, 32, 256).
constexpr int64_t quant_block_cols(QuantKind k) { return k == QuantKind::kQ4_K ? 256 : 32; }
// GGUF bytes of one block of `k` (18, 34, 144).
constexpr int64_t quant_gguf_block_bytes(QuantKind k) {
  return k == QuantKind::kQ4_0 ? 18 : k == QuantKind::kQ8_0 ? 34 : 144;
}
// True when cols > 0 is a multiple of the block size.
constexpr bool quant_cols_valid(QuantKind k, int64_t cols) { return cols > 0 && cols % quant_block_cols(k) == 0; }

constexpr QuantRowLayout quant_row_layout(QuantKind k, int64_t cols) {
  QuantRowLayout l;
  const int64_t gc = k == QuantKind::kQ8_0 ? 64 : 128;
  l.group_cols = gc;
  l.groups = (cols + gc - 1) / gc;
  l.blocks = l.groups * gc / 32;
  l.scale_offset = 64 * l.groups;
  int64_t end = 0;
  if (k == QuantKind::kQ4_0) {
    end = 72 * l.groups;
  } else if (k == QuantKind::kQ8_0) {
    end = 68 * l.groups;
  } else {
    l.dm_offset = 72 * l.groups;
    end = l.dm_offset + 4 * (cols / 256);
  }
  l.row_bytes = (end + 15) / 16 * 16;
  return l;
}

// Bytes of one repacked row (a multiple of 16). cols: a multiple of quant_block_cols(k).
int64_t quant_device_row_bytes(QuantKind k, int64_t cols);

// gguf_row: cols / block_cols GGUF blocks (any alignment) -> dev_row: quant_device_row_bytes
// bytes, every byte written (padding zeroed).
void quant_repack_row(QuantKind k, const uint8_t* gguf_row, int64_t cols, uint8_t* dev_row);

// Host reference: the device row back to floats, out: [cols]; bitwise hs::dequantize_row of
// the GGUF row it was repacked from.
void quant_dequantize_device_row(QuantKind k, const uint8_t* dev_row, int64_t cols, float* out);

}  // namespace hs::cuda
