// backend/cuda/quant_layout.cpp — repacking GGUF rows into the device layout of
// quant_layout.h, and its host reference dequantizer.
//
// The repack moves bytes only (Q4_K also unpacks get_scale_min_k4's 6-bit pairs and reorders
// nibbles); the reference decodes the device bytes with core/quant.cpp's exact float
// operations (products and differences in separate statements, so no FMA contraction), so
// the tests can require bit equality with hs::dequantize_row. Cost: O(row bytes) per row.
#include "backend/cuda/quant_layout.h"

#include <cstring>

#include "core/fp16.h"
#include "core/quant.h"

namespace hs::cuda {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q4_K super-block -> its 8 sub-blocks as Q4_0-ordered nibble blocks (nib[8][16]) and the
// unpacked scales / mins.
void unpack_q4k(const BlockQ4K& b, uint8_t (&nib)[8][16], uint8_t (&sc)[8], uint8_t (&m)[8]) {
  for (int j = 0; j < 8; ++j) {
    get_scale_min_k4(j, b.scales, &sc[j], &m[j]);
    const uint8_t* q = b.qs + 32 * (j / 2);  // [32]: low nibbles -> sub-block 2i, high -> 2i+1
    const int shift = (j & 1) ? 4 : 0;
    for (int l = 0; l < 16; ++l) {
      const uint8_t lo = static_cast<uint8_t>((q[l] >> shift) & 0x0f);       // element l
      const uint8_t hi = static_cast<uint8_t>((q[16 + l] >> shift) & 0x0f);  // element 16 + l
      nib[j][l] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

// Byte i (0..3) of lane t's word of nibble-block j inside group g (Q4_0 / Q4_K quants).
int64_t q4_byte(int64_t g, int t, int j, int i) { return 64 * g + 16 * t + 4 * j + i; }

}  // namespace

int64_t quant_device_row_bytes(QuantKind k, int64_t cols) { return quant_row_layout(k, cols).row_bytes; }

void quant_repack_row(QuantKind k, const uint8_t* src, int64_t cols, uint8_t* dst) {
  const QuantRowLayout l = quant_row_layout(k, cols);
  std::memset(dst, 0, static_cast<size_t>(l.row_bytes));
  if (k == QuantKind::kQ4_0) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      BlockQ4_0 blk;
      std::memcpy(&blk, src + b * sizeof(BlockQ4_0), sizeof blk);
      const int64_t g = b / 4;
      const int j = static_cast<int>(b % 4);
      for (int t = 0; t < 4; ++t)
        for (int i = 0; i < 4; ++i) dst[q4_byte(g, t, j, i)] = blk.qs[4 * t + i];
      std::memcpy(dst + l.scale_offset + 2 * b, &blk.d, 2);
    }
  } else if (k == QuantKind::kQ8_0) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      BlockQ8_0 blk;
      std::memcpy(&blk, src + b * sizeof(BlockQ8_0), sizeof blk);
      const int64_t g = b / 2;
      const int j = static_cast<int>(b % 2);
      for (int t = 0; t < 4; ++t)
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < 4; ++i)
            dst[64 * g + 16 * t + 8 * j + 4 * h + i] = static_cast<uint8_t>(blk.qs[16 * h + 4 * t + i]);
      std::memcpy(dst + l.scale_offset + 2 * b, &blk.d, 2);
    }
  } else {
    for (int64_t s = 0; s < cols / 256; ++s) {
      BlockQ4K blk;
      std::memcpy(&blk, src + s * sizeof(BlockQ4K), sizeof blk);
      uint8_t nib[8][16], sc[8], m[8];
      unpack_q4k(blk, nib, sc, m);
      for (int k8 = 0; k8 < 8; ++k8) {
        const int64_t b = 8 * s + k8;  // sub-block index in the row
        const int64_t g = b / 4;
        const int j = static_cast<int>(b % 4);
        for (int t = 0; t < 4; ++t)
          for (int i = 0; i < 4; ++i) dst[q4_byte(g, t, j, i)] = nib[k8][4 * t + i];
        dst[l.scale_offset + 8 * g + j] = sc[k8];
        dst[l.scale_offset + 8 * g + 4 + j] = m[k8];
      }
      std::memcpy(dst + l.dm_offset + 4 * s, &blk.d, 2);
      std::memcpy(dst + l.dm_offset + 4 * s + 2, &blk.dmin, 2);
    }
  }
}

void quant_dequantize_device_row(QuantKind k, const uint8_t* row, int64_t cols, float* out) {
  const QuantRowLayout l = quant_row_layout(k, cols);
  for (int64_t b = 0; b < cols / 32; ++b) {
    float* y = out + 32 * b;  // [32]
    if (k == QuantKind::kQ8_0) {
      const float d = fp16_to_fp32(load_u16(row + l.scale_offset + 2 * b));
      const int64_t g = b / 2;
      const int j = static_cast<int>(b % 2);
      for (int t = 0; t < 4; ++t)
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < 4; ++i) {
            const auto q = static_cast<int8_t>(row[64 * g + 16 * t + 8 * j + 4 * h + i]);
            y[16 * h + 4 * t + i] = static_cast<float>(q) * d;
          }
      continue;
    }
    const int64_t g = b / 4;
    const int j = static_cast<int>(b % 4);
    uint8_t q[32];
    for (int t = 0; t < 4; ++t)
      for (int i = 0; i < 4; ++i) {
        const uint8_t v = row[q4_byte(g, t, j, i)];
        q[4 * t + i] = v & 0x0f;
        q[16 + 4 * t + i] = v >> 4;
      }
    if (k == QuantKind::kQ4_0) {
      const float d = fp16_to_fp32(load_u16(row + l.scale_offset + 2 * b));
      for (int e = 0; e < 32; ++e) y[e] = static_cast<float>(q[e] - 8) * d;
    } else {
      const int64_t s = b / 8;
      const float d = fp16_to_fp32(load_u16(row + l.dm_offset + 4 * s));
      const float dmin = fp16_to_fp32(load_u16(row + l.dm_offset + 4 * s + 2));
      const float d0 = d * static_cast<float>(row[l.scale_offset + 8 * g + j]);
      const float m0 = dmin * static_cast<float>(row[l.scale_offset + 8 * g + 4 + j]);
      for (int e = 0; e < 32; ++e) {
        const float p = d0 * static_cast<float>(q[e]);
        y[e] = p - m0;
      }
    }
  }
}

}  // namespace hs::cuda
