// backend/cpu/matmul_exact_kernel.h — dequantizers and the float tile kernel, written once
// and compiled per ISA (matmul_exact.cpp baseline, *_avx2.cpp, *_avx512.cpp) so the loops
// vectorize with that ISA. Everything here has internal linkage and calls no inline library
// templates: a shared inline body could be linked to the wrong ISA's copy.
// Formulas: ggml's dequantize_row_* (../shared/reference/models-and-gguf.md §7).
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/simd_math.h"
#include "core/quant.h"

// 64-byte vectors by value between internal-linkage functions: no ABI is crossed.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace hs::cpu::detail {
namespace {

float f16_to_f32(uint16_t h) {
  _Float16 f;
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}
float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Dequantize n elements (a whole number of blocks) starting at block pointer `src`.
void dequant(DType type, const uint8_t* src, int64_t n, float* y) {
  switch (type) {
    case DType::F32: std::memcpy(y, src, n * 4); return;
    case DType::F16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::BF16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::Q4_0: {
      const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k, y += 32) {
        const float d = f16_to_f32(b[k].d);
        const uint8_t* qs = b[k].qs;
#pragma omp simd
        for (int j = 0; j < 16; ++j) {
          y[j] = static_cast<float>((qs[j] & 15) - 8) * d;
          y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
    case DType::Q4_1: {
      const BlockQ4_1* b = reinterpret_cast<const BlockQ4_1*>(src);
      for (int64_t k = 0; k < n / 32; ++k, y += 32) {
        const float d = f16_to_f32(b[k].d), m = f16_to_f32(b[k].m);
        const uint8_t* qs = b[k].qs;
#pragma omp simd
        for (int j = 0; j < 16; ++j) {
          y[j] = static_cast<float>(qs[j] & 15) * d + m;
          y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
        }
      }
      return;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
      const bool has_min = type == DType::Q5_1;
      const int64_t bytes = has_min ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
      for (int64_t k = 0; k < n / 32; ++k, y += 32) {
        const uint8_t* blk = src + k * bytes;
        uint16_t dh, mh = 0;
        std::memcpy(&dh, blk, 2);
        if (has_min) std::memcpy(&mh, blk + 2, 2);
        const uint8_t* qhp = blk + (has_min ? 4 : 2);
        uint32_t qh;
        std::memcpy(&qh, qhp, 4);
        const uint8_t* qs = qhp + 4;
        const float d = f16_to_f32(dh);
        const float m = has_min ? f16_to_f32(mh) : -16.0f * d;
#pragma omp simd
        for (int j = 0; j < 16; ++j) {
          const int x0 = (qs[j] & 15) | (((qh >> j) << 4) & 0x10);
          const int x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
          y[j] = static_cast<float>(x0) * d + m;
          y[j + 16] = static_cast<float>(x1) * d + m;
        }
      }
      return;
    }
    case DType::Q8_0: {
      const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k, y += 32) {
        const float d = f16_to_f32(b[k].d);
#pragma omp simd
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b[k].qs[j]) * d;
      }
      return;
    }
    case DType::Q4_K: {
      const BlockQ4K* b = reinterpret_cast<const BlockQ4K*>(src);
      for (int64_t k = 0; k < n / 256; ++k) {
        const float d = f16_to_f32(b[k].d), dmin = f16_to_f32(b[k].dmin);
        const uint8_t* q = b[k].qs;
        for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
          int sc1, m1, sc2, m2;
          scale_min_k4(is, b[k].scales, sc1, m1);
          scale_min_k4(is + 1, b[k].scales, sc2, m2);
          const float d1 = d * sc1, mm1 = dmin * m1, d2 = d * sc2, mm2 = dmin * m2;
#pragma omp simd
          for (int l = 0; l < 32; ++l) {
            y[l] = d1 * static_cast<float>(q[l] & 15) - mm1;
            y[l + 32] = d2 * static_cast<float>(q[l] >> 4) - mm2;
          }
        }
      }
      return;
    }
    case DType::Q5_K: {
      const BlockQ5K* b = reinterpret_cast<const BlockQ5K*>(src);
      for (int64_t k = 0; k < n / 256; ++k) {
        const float d = f16_to_f32(b[k].d), dmin = f16_to_f32(b[k].dmin);
        const uint8_t* ql = b[k].qs;
        const uint8_t* qh = b[k].qh;
        int u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32, y += 64, u1 <<= 2, u2 <<= 2) {
          int sc1, m1, sc2, m2;
          scale_min_k4(is, b[k].scales, sc1, m1);
          scale_min_k4(is + 1, b[k].scales, sc2, m2);
          const float d1 = d * sc1, mm1 = dmin * m1, d2 = d * sc2, mm2 = dmin * m2;
#pragma omp simd
          for (int l = 0; l < 32; ++l) {
            y[l] = d1 * static_cast<float>((ql[l] & 15) + ((qh[l] & u1) ? 16 : 0)) - mm1;
            y[l + 32] = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - mm2;
          }
        }
      }
      return;
    }
    case DType::Q6_K: {
      const BlockQ6K* b = reinterpret_cast<const BlockQ6K*>(src);
      for (int64_t k = 0; k < n / 256; ++k) {
        const float d = f16_to_f32(b[k].d);
        const uint8_t* ql = b[k].ql;
        const uint8_t* qh = b[k].qh;
        const int8_t* sc = b[k].scales;
        for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
          for (int g = 0; g < 2; ++g) {  // l in [16g, 16g + 16): scale index is = g
            const float s0 = d * sc[g], s2 = d * sc[g + 2], s4 = d * sc[g + 4], s6 = d * sc[g + 6];
#pragma omp simd
            for (int l = 16 * g; l < 16 * g + 16; ++l) {
              const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
              const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
              const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
              const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
              y[l] = s0 * static_cast<float>(q1);
              y[l + 32] = s2 * static_cast<float>(q2);
              y[l + 64] = s4 * static_cast<float>(q3);
              y[l + 96] = s6 * static_cast<float>(q4);
            }
          }
        }
      }
      return;
    }
    default: return;  // rejected by the driver before any kernel runs
  }
}


// ---- fused dot products for small token counts (decode) ----
// Weights are unpacked in registers and dotted with float activations directly; offsets
// and mins use per-16-element activation sums (xs16), e.g. Q4_1:
//   Σ (q·d + m)·x = d·(q·x) + m·Σx.
// Vector extensions compile to one zmm op (AVX-512) or two ymm ops (AVX2).
typedef uint8_t v16u8 __attribute__((vector_size(16)));
typedef int8_t v16i8 __attribute__((vector_size(16)));
typedef uint32_t v16u32 __attribute__((vector_size(64)));
typedef int32_t v16i32 __attribute__((vector_size(64)));

v16f load16(const float* p) { return load_v16(p); }
v16u8 load16u8(const uint8_t* p) {
  v16u8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
// Two steps (widen, then int→float): GCC scalarizes a direct u8→float vector conversion.
v16f u8_to_f(v16u8 v) { return __builtin_convertvector(__builtin_convertvector(v, v16i32), v16f); }
// int8 via the unsigned path (x ^ 0x80 = x + 128): GCC 12 scalarizes a signed byte widening.
v16f i8_to_f(v16i8 v) { return u8_to_f(reinterpret_cast<v16u8>(v) ^ 0x80) - 128.0f; }
v16f u32_to_f(v16u32 v) { return __builtin_convertvector(reinterpret_cast<v16i32>(v), v16f); }
float hsum(v16f v) { return hsum_v16(v); }

// Per-16 activation sums: xs16[i] = Σ x[16i .. 16i+15].
void sums16(const float* x, int64_t n, float* xs16) {
  for (int64_t i = 0; i < n / 16; ++i) xs16[i] = hsum(load16(x + 16 * i));
}

// Σ_i W[row][i]·x[i] for one row of a quantized type (not F32/F16/BF16).
float fused_dot(DType type, const uint8_t* row, int64_t n_in, const float* x, const float* xs16) {
  v16f acc = {};
  float off = 0;  // the Σx-weighted terms (mins, zero points)
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1: {
      const bool q41 = type == DType::Q4_1;
      const int64_t bytes = q41 ? 20 : 18;
      for (int64_t k = 0; k < n_in / 32; ++k) {
        const uint8_t* b = row + k * bytes;
        uint16_t dh, mh = 0;
        std::memcpy(&dh, b, 2);
        if (q41) std::memcpy(&mh, b + 2, 2);
        const v16u8 q = load16u8(b + (q41 ? 4 : 2));
        const float* xk = x + 32 * k;
        const v16f p = u8_to_f(q & 15) * load16(xk) + u8_to_f(q >> 4) * load16(xk + 16);
        const float d = f16_to_f32(dh);
        acc += d * p;
        off += (q41 ? f16_to_f32(mh) : -8.0f * d) * (xs16[2 * k] + xs16[2 * k + 1]);
      }
      break;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
      const bool q51 = type == DType::Q5_1;
      const int64_t bytes = q51 ? 24 : 22;
      const v16u32 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
      for (int64_t k = 0; k < n_in / 32; ++k) {
        const uint8_t* b = row + k * bytes;
        uint16_t dh, mh = 0;
        std::memcpy(&dh, b, 2);
        if (q51) std::memcpy(&mh, b + 2, 2);
        uint32_t qh;
        std::memcpy(&qh, b + (q51 ? 4 : 2), 4);
        const v16u8 q = load16u8(b + (q51 ? 8 : 6));
        const v16u32 hv = qh + v16u32{};
        const v16f hi_lo = u32_to_f((hv >> lane) & 1) * 16.0f;
        const v16f hi_hi = u32_to_f((hv >> (lane + 16)) & 1) * 16.0f;
        const float* xk = x + 32 * k;
        const v16f p = (u8_to_f(q & 15) + hi_lo) * load16(xk) + (u8_to_f(q >> 4) + hi_hi) * load16(xk + 16);
        const float d = f16_to_f32(dh);
        acc += d * p;
        off += (q51 ? f16_to_f32(mh) : -16.0f * d) * (xs16[2 * k] + xs16[2 * k + 1]);
      }
      break;
    }
    case DType::Q8_0: {
      for (int64_t k = 0; k < n_in / 32; ++k) {
        const uint8_t* b = row + k * 34;
        uint16_t dh;
        std::memcpy(&dh, b, 2);
        v16i8 q0, q1;
        std::memcpy(&q0, b + 2, 16);
        std::memcpy(&q1, b + 18, 16);
        const float* xk = x + 32 * k;
        const v16f p = i8_to_f(q0) * load16(xk) + i8_to_f(q1) * load16(xk + 16);
        acc += f16_to_f32(dh) * p;
      }
      break;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool q5 = type == DType::Q5_K;
      const int64_t bytes = q5 ? 176 : 144;
      for (int64_t k = 0; k < n_in / 256; ++k) {
        const uint8_t* b = row + k * bytes;
        uint16_t dh, mh;
        std::memcpy(&dh, b, 2);
        std::memcpy(&mh, b + 2, 2);
        const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
        const uint8_t* scales = b + 4;
        const uint8_t* qh = b + 16;              // Q5_K only: [32]
        const uint8_t* qs = b + (q5 ? 48 : 16);  // [128]
        const float* xb = x + 256 * k;
        const float* sb = xs16 + 16 * k;
        for (int grp = 0; grp < 4; ++grp) {  // 64 elements: low nibbles then high nibbles of 32 bytes
          int sc1, m1, sc2, m2;
          scale_min_k4(2 * grp, scales, sc1, m1);
          scale_min_k4(2 * grp + 1, scales, sc2, m2);
          const uint8_t* q = qs + 32 * grp;
          const v16u8 qa = load16u8(q), qb = load16u8(q + 16);
          v16f lo_a = u8_to_f(qa & 15), lo_b = u8_to_f(qb & 15), hi_a = u8_to_f(qa >> 4), hi_b = u8_to_f(qb >> 4);
          if (q5) {
            const v16u8 ha = load16u8(qh), hb = load16u8(qh + 16);
            const int s1 = 2 * grp, s2 = 2 * grp + 1;
            lo_a += u8_to_f((ha >> s1) & 1) * 16.0f;
            lo_b += u8_to_f((hb >> s1) & 1) * 16.0f;
            hi_a += u8_to_f((ha >> s2) & 1) * 16.0f;
            hi_b += u8_to_f((hb >> s2) & 1) * 16.0f;
          }
          const float* xg = xb + 64 * grp;
          const v16f p1 = lo_a * load16(xg) + lo_b * load16(xg + 16);
          const v16f p2 = hi_a * load16(xg + 32) + hi_b * load16(xg + 48);
          acc += (d * sc1) * p1 + (d * sc2) * p2;
          off -= dmin * m1 * (sb[4 * grp] + sb[4 * grp + 1]) + dmin * m2 * (sb[4 * grp + 2] + sb[4 * grp + 3]);
        }
      }
      break;
    }
    case DType::Q6_K: {
      for (int64_t k = 0; k < n_in / 256; ++k) {
        const uint8_t* b = row + k * 210;
        const uint8_t* ql = b;
        const uint8_t* qh = b + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
        uint16_t dh;
        std::memcpy(&dh, b + 208, 2);
        const float d = f16_to_f32(dh);
        for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8) {
          const float* xh = x + 256 * k + 128 * half;
          const float* sh = xs16 + 16 * k + 8 * half;
          for (int g = 0; g < 2; ++g) {  // l in [16g, 16g + 16)
            const v16u8 l0 = load16u8(ql + 16 * g), l1 = load16u8(ql + 32 + 16 * g), h = load16u8(qh + 16 * g);
            const v16f q1 = u8_to_f((l0 & 15) | ((h & 3) << 4));
            const v16f q2 = u8_to_f((l1 & 15) | (((h >> 2) & 3) << 4));
            const v16f q3 = u8_to_f((l0 >> 4) | (((h >> 4) & 3) << 4));
            const v16f q4 = u8_to_f((l1 >> 4) | (((h >> 6) & 3) << 4));
            const float s0 = d * sc[g], s2 = d * sc[g + 2], s4 = d * sc[g + 4], s6 = d * sc[g + 6];
            acc += s0 * (q1 * load16(xh + 16 * g)) + s2 * (q2 * load16(xh + 32 + 16 * g)) +
                   s4 * (q3 * load16(xh + 64 + 16 * g)) + s6 * (q4 * load16(xh + 96 + 16 * g));
            // the -32 offset: Σ s·(-32)·x over each 16-run
            off -= 32.0f * (s0 * sh[g] + s2 * sh[2 + g] + s4 * sh[4 + g] + s6 * sh[6 + g]);
          }
        }
      }
      break;
    }
    default: break;
  }
  return hsum(acc) + off;
}

[[maybe_unused]] bool has_fused(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q8_0 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

// y[t][o] for o in [r0, r1), t in [t0, t1) with the fused dots; xs16: [n_tokens][n_in/16].
void fused_tile(const WeightView& w, int64_t row_bytes, const float* x, const float* xs16, int64_t r0, int64_t r1,
                int64_t t0, int64_t t1, float* y) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  for (int64_t o = r0; o < r1; ++o)
    for (int64_t t = t0; t < t1; ++t)
      y[t * w.n_out + o] = fused_dot(w.type, base + o * row_bytes, w.n_in, x + t * w.n_in, xs16 + t * (w.n_in / 16));
}

constexpr int kRows = 4;  // weight rows dequantized together, dotted against each token

// y[t][o] for o in [r0, r1), t in [t0, t1). `buf` holds kRows dequantized rows [kRows][n_in].
void exact_tile(const WeightView& w, int64_t row_bytes, const float* x, int64_t r0, int64_t r1, int64_t t0,
                int64_t t1, float* y, float* buf) {
  const int64_t n_in = w.n_in;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  for (int64_t o = r0; o < r1; o += kRows) {
    const int rows = static_cast<int>(r1 - o < kRows ? r1 - o : kRows);
    for (int r = 0; r < rows; ++r) dequant(w.type, base + (o + r) * row_bytes, n_in, buf + r * n_in);
    for (int64_t t = t0; t < t1; ++t) {
      const float* xt = x + t * n_in;
      if (rows == kRows) {
        const float* w0 = buf;
        const float* w1 = buf + n_in;
        const float* w2 = buf + 2 * n_in;
        const float* w3 = buf + 3 * n_in;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t i = 0; i < n_in; ++i) {
          s0 += w0[i] * xt[i];
          s1 += w1[i] * xt[i];
          s2 += w2[i] * xt[i];
          s3 += w3[i] * xt[i];
        }
        float* yt = y + t * w.n_out + o;
        yt[0] = s0;
        yt[1] = s1;
        yt[2] = s2;
        yt[3] = s3;
      } else {
        for (int r = 0; r < rows; ++r) {
          const float* wr = buf + r * n_in;
          float s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < n_in; ++i) s += wr[i] * xt[i];
          y[t * w.n_out + o + r] = s;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hs::cpu::detail
