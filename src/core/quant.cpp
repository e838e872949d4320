// core/quant.cpp — scalar reference dequantizers for the block layouts in core/quant.h.
//
// Arithmetic mirrors ggml's dequantize_row_* (ggml-quants.c) exactly: integers are formed
// first and converted to float exactly, then one float32 multiply (Q4_0, Q5_0, Q8_0), a
// multiply then an add (Q4_1, Q5_1: q*d + m), a multiply then a subtract with per-sub-block
// products computed once (Q4_K, Q5_K: (d*sc)*q - dmin*m), or two multiplies (Q6_K:
// (d*sc)*q). The product and the add/subtract are separate statements so they are rounded
// separately even where the compiler would contract `a*b + c` into an FMA.
// Cost: one pass over src and dst, no allocation; unaligned sources are staged through a
// small stack buffer of blocks.
#include "core/quant.h"

#include <algorithm>
#include <cstring>

#include "core/fp16.h"

namespace hs {

void dequantize_q4_0(const BlockQ4_0* x, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    float* y = dst + b * kQK;  // [32]
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (x[b].qs[j] & 0x0f) - 8;
      const int hi = (x[b].qs[j] >> 4) - 8;
      y[j] = static_cast<float>(lo) * d;
      y[j + kQK / 2] = static_cast<float>(hi) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    float* y = dst + b * kQK;  // [32]
    for (int j = 0; j < kQK / 2; ++j) {
      const float p_lo = static_cast<float>(x[b].qs[j] & 0x0f) * d;
      const float p_hi = static_cast<float>(x[b].qs[j] >> 4) * d;
      y[j] = p_lo + m;
      y[j + kQK / 2] = p_hi + m;
    }
  }
}

namespace {

// The 32 fifth bits of a Q5_0 / Q5_1 block: a little-endian u32, bit j -> element j.
inline uint32_t load_qh32(const uint8_t* qh) {
  return static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
         (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
}

}  // namespace

void dequantize_q5_0(const BlockQ5_0* x, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const uint32_t qh = load_qh32(x[b].qh);
    float* y = dst + b * kQK;  // [32]
    for (int j = 0; j < kQK / 2; ++j) {
      const int h_lo = static_cast<int>((qh >> j) & 1u) << 4;
      const int h_hi = static_cast<int>((qh >> (j + kQK / 2)) & 1u) << 4;
      const int lo = ((x[b].qs[j] & 0x0f) | h_lo) - 16;
      const int hi = ((x[b].qs[j] >> 4) | h_hi) - 16;
      y[j] = static_cast<float>(lo) * d;
      y[j + kQK / 2] = static_cast<float>(hi) * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    const uint32_t qh = load_qh32(x[b].qh);
    float* y = dst + b * kQK;  // [32]
    for (int j = 0; j < kQK / 2; ++j) {
      const int h_lo = static_cast<int>((qh >> j) & 1u) << 4;
      const int h_hi = static_cast<int>((qh >> (j + kQK / 2)) & 1u) << 4;
      const float p_lo = static_cast<float>((x[b].qs[j] & 0x0f) | h_lo) * d;
      const float p_hi = static_cast<float>((x[b].qs[j] >> 4) | h_hi) * d;
      y[j] = p_lo + m;
      y[j + kQK / 2] = p_hi + m;
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    float* y = dst + b * kQK;  // [32]
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[b].qs[j]) * d;
  }
}

void dequantize_q4_k(const BlockQ4K* x, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    const uint8_t* q = x[b].qs;
    float* y = dst + b * kQK_K;  // [256] as [4 chunks][2 sub-blocks][32]
    for (int chunk = 0; chunk < 4; ++chunk) {
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(2 * chunk, x[b].scales, &sc0, &m0);
      get_scale_min_k4(2 * chunk + 1, x[b].scales, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0);
      const float min0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1);
      const float min1 = dmin * static_cast<float>(m1);
      for (int l = 0; l < 32; ++l) {
        const float p0 = d0 * static_cast<float>(q[l] & 0x0f);
        const float p1 = d1 * static_cast<float>(q[l] >> 4);
        y[l] = p0 - min0;
        y[l + 32] = p1 - min1;
      }
      q += 32;
      y += 64;
    }
  }
}

void dequantize_q5_k(const BlockQ5K* x, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const float dmin = fp16_to_fp32(x[b].dmin);
    const uint8_t* ql = x[b].qs;
    const uint8_t* qh = x[b].qh;  // [32], shared by all chunks: bit i -> sub-block i
    float* y = dst + b * kQK_K;   // [256] as [4 chunks][2 sub-blocks][32]
    for (int chunk = 0; chunk < 4; ++chunk) {
      const int s0 = 2 * chunk, s1 = 2 * chunk + 1;  // sub-block indices
      uint8_t sc0, m0, sc1, m1;
      get_scale_min_k4(s0, x[b].scales, &sc0, &m0);
      get_scale_min_k4(s1, x[b].scales, &sc1, &m1);
      const float d0 = d * static_cast<float>(sc0);
      const float min0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1);
      const float min1 = dmin * static_cast<float>(m1);
      for (int l = 0; l < 32; ++l) {
        const int v0 = (ql[l] & 0x0f) | (((qh[l] >> s0) & 1) << 4);
        const int v1 = (ql[l] >> 4) | (((qh[l] >> s1) & 1) << 4);
        const float p0 = d0 * static_cast<float>(v0);
        const float p1 = d1 * static_cast<float>(v1);
        y[l] = p0 - min0;
        y[l + 32] = p1 - min1;
      }
      ql += 32;
      y += 64;
    }
  }
}

void dequantize_q6_k(const BlockQ6K* x, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    float* y = dst + b * kQK_K;  // [256] as [2 halves][4 groups][32]
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[b].ql + 64 * half;      // [64]
      const uint8_t* qh = x[b].qh + 32 * half;      // [32]
      const int8_t* sc = x[b].scales + 8 * half;    // [8]: 2 per group of 32
      float* yh = y + 128 * half;                   // [128]
      // Per-sub-block factor d*scale, rounded once (as ggml's `d * sc[is] * q`).
      float ds[8];  // [8 sub-blocks of 16]
      for (int i = 0; i < 8; ++i) ds[i] = d * static_cast<float>(sc[i]);
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        yh[l] = ds[is + 0] * static_cast<float>(q1);
        yh[l + 32] = ds[is + 2] * static_cast<float>(q2);
        yh[l + 64] = ds[is + 4] * static_cast<float>(q3);
        yh[l + 96] = ds[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

void dequantize_f16(const void* src, float* dst, int64_t n_elems) {
  const auto* p = static_cast<const uint8_t*>(src);  // [n_elems][2] little-endian
  for (int64_t i = 0; i < n_elems; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = fp16_to_fp32(h);
  }
}

void dequantize_bf16(const void* src, float* dst, int64_t n_elems) {
  const auto* p = static_cast<const uint8_t*>(src);  // [n_elems][2] little-endian
  for (int64_t i = 0; i < n_elems; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}

namespace {

// Runs a block kernel over src, staging through an aligned stack buffer when src is not
// aligned for Block (e.g. a tensor at an odd offset inside a caller's byte buffer).
template <typename Block, int kElems>
void run_blocks(void (*kernel)(const Block*, float*, int64_t), const void* src, float* dst,
                int64_t n_blocks) {
  if (reinterpret_cast<uintptr_t>(src) % alignof(Block) == 0) {
    kernel(static_cast<const Block*>(src), dst, n_blocks);
    return;
  }
  constexpr int64_t kStage = 16;
  Block stage[kStage];  // [kStage] blocks
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n_blocks; i += kStage) {
    const int64_t n = std::min(kStage, n_blocks - i);
    std::memcpy(stage, p + i * static_cast<int64_t>(sizeof(Block)),
                static_cast<size_t>(n) * sizeof(Block));
    kernel(stage, dst + i * kElems, n);
  }
}

}  // namespace

bool dequantize_supported(DType type) {
  switch (type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

Status dequantize_row(DType type, const void* src, size_t src_bytes, float* dst,
                      int64_t n_elems) {
  const auto info = dtype_info(type);
  if (!info) {
    return make_error(StatusCode::kUnsupported, "dequantize: unknown tensor type id {}",
                      static_cast<uint32_t>(type));
  }
  if (!dequantize_supported(type)) {
    return make_error(StatusCode::kUnsupported, "dequantize: tensor type {} is not supported",
                      info->name);
  }
  if (n_elems < 0) {
    return make_error(StatusCode::kInvalidArgument, "dequantize {}: negative element count {}",
                      info->name, n_elems);
  }
  if (n_elems % info->block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "dequantize {}: {} elements is not a multiple of the block size {}",
                      info->name, n_elems, info->block_elems);
  }
  const uint64_t n_blocks = static_cast<uint64_t>(n_elems) / info->block_elems;
  if (n_blocks > src_bytes / info->block_bytes) {  // division form: no overflow
    return make_error(StatusCode::kCorrupt,
                      "dequantize {}: {} elements need {} bytes, source has {}", info->name,
                      n_elems, n_blocks * info->block_bytes, src_bytes);
  }
  if (n_elems == 0) return Status::ok();
  const auto nb = static_cast<int64_t>(n_blocks);
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n_elems) * sizeof(float));
      break;
    case DType::F16: dequantize_f16(src, dst, n_elems); break;
    case DType::BF16: dequantize_bf16(src, dst, n_elems); break;
    case DType::Q4_0: run_blocks<BlockQ4_0, kQK>(dequantize_q4_0, src, dst, nb); break;
    case DType::Q4_1: run_blocks<BlockQ4_1, kQK>(dequantize_q4_1, src, dst, nb); break;
    case DType::Q5_0: run_blocks<BlockQ5_0, kQK>(dequantize_q5_0, src, dst, nb); break;
    case DType::Q5_1: run_blocks<BlockQ5_1, kQK>(dequantize_q5_1, src, dst, nb); break;
    case DType::Q8_0: run_blocks<BlockQ8_0, kQK>(dequantize_q8_0, src, dst, nb); break;
    case DType::Q4_K: run_blocks<BlockQ4K, kQK_K>(dequantize_q4_k, src, dst, nb); break;
    case DType::Q5_K: run_blocks<BlockQ5K, kQK_K>(dequantize_q5_k, src, dst, nb); break;
    case DType::Q6_K: run_blocks<BlockQ6K, kQK_K>(dequantize_q6_k, src, dst, nb); break;
    default:
      return make_error(StatusCode::kInternal, "dequantize: no kernel for {}", info->name);
  }
  return Status::ok();
}

}  // namespace hs
