// backend/cpu/matmul_scalar.cpp — portable kernels for every matmul weight type, and the
// reference definition of the quantized-activation math the SIMD kernels reproduce.
//
// 32-wide types: a weight block is written as u[j] * dw + m (u unsigned for Q4_0/Q4_1/
// Q5_0/Q5_1, with m = -8 dw / -16 dw for the symmetric types; Q8_0 keeps signed quants and
// m = 0), so its dot with an activation block (quants a[j], scale da, s = da * sum a) is
//     dw * da * sum(u[j] a[j]) + m * s.
// K-quants: per super-block, the exact integer sum over sub-blocks of scale * dot(q, a),
// minus the min term from bsums (Q4_K/Q5_K) or the -32 offset from bsums (Q6_K), times
// d * da in fp32. The integer parts are exact; only the per-block fp32 scaling rounds.
// kInt8x2 (a.x2): token t has a value row 2t and a residual row 2t+1 (scale d1 / 256);
// 32-wide types combine the integer sums as 256 * dot1 + dot2, K-quants add the two
// scaled results.
//
// Cost: one multiply-add per element, no SIMD; used where AVX2 is missing and as a
// correctness baseline for the SIMD levels (HS_SIMD=scalar).
#include <cmath>
#include <cstring>

#include "backend/cpu/matmul_kernels.h"
#include "core/fp16.h"
#include "core/quant.h"

namespace hs::cpu::detail {
namespace {

float load_fp16(const uint16_t& h) { return fp16_to_fp32(h); }

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ------------------------------------------------------------------ activation quantizers

// Block scale and its inverse: amax / 127, or parent / 256 for a residual row.
void block_scale(const float* xb, int n, const float* parent_d, int64_t b, float& db, float& id) {
  if (parent_d != nullptr) {
    db = parent_d[b] * (1.0f / 256.0f);
    id = parent_d[b] != 0.0f ? 256.0f / parent_d[b] : 0.0f;
    return;
  }
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
  db = amax / 127.0f;
  id = db != 0.0f ? 1.0f / db : 0.0f;
}

// nearbyint: round half to even, as the SIMD cvtps2dq in the default rounding mode. The
// clamp only acts on residual rows (|x * id| <= 127 otherwise).
int quant(float v, float id) {
  const float r = std::nearbyint(v * id);
  return static_cast<int>(std::fmin(127.0f, std::fmax(-127.0f, r)));
}

void quantize_q8_scalar(const float* x, int64_t n_in, int8_t* qs, float* d, float* s,
                        float* resid, const float* parent_d) {
  for (int64_t b = 0; b < n_in / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;  // [32]
    float db, id;
    block_scale(xb, kQ8Block, parent_d, b, db, id);
    int sum = 0;
    for (int j = 0; j < kQ8Block; ++j) {
      const int q = quant(xb[j], id);
      qs[b * kQ8Block + j] = static_cast<int8_t>(q);
      if (resid) resid[b * kQ8Block + j] = xb[j] - db * static_cast<float>(q);
      sum += q;
    }
    d[b] = db;
    s[b] = db * static_cast<float>(sum);
  }
}

void quantize_q8k_scalar(const float* x, int64_t n_in, int8_t* qs, float* d, int16_t* bsums,
                         float* resid, const float* parent_d) {
  for (int64_t b = 0; b < n_in / kQ8KBlock; ++b) {
    const float* xb = x + b * kQ8KBlock;  // [256]
    float db, id;
    block_scale(xb, kQ8KBlock, parent_d, b, db, id);
    for (int g = 0; g < kQ8KBlock / kQ8KSub; ++g) {
      int sum = 0;
      for (int j = g * kQ8KSub; j < (g + 1) * kQ8KSub; ++j) {
        const int q = quant(xb[j], id);
        qs[b * kQ8KBlock + j] = static_cast<int8_t>(q);
        if (resid) resid[b * kQ8KBlock + j] = xb[j] - db * static_cast<float>(q);
        sum += q;
      }
      bsums[b * (kQ8KBlock / kQ8KSub) + g] = static_cast<int16_t>(sum);
    }
    d[b] = db;
  }
}

// ------------------------------------------------------------------ 32-wide weight blocks

// Unpacks one weight block to u[32] with its scale and additive offset (see the header).
struct Unpacked32 {
  int u[kQ8Block];
  float dw;
  float m;
};

void unpack_q4_0(const uint8_t* p, Unpacked32& o) {
  BlockQ4_0 b;
  std::memcpy(&b, p, sizeof(b));
  o.dw = load_fp16(b.d);
  o.m = -8.0f * o.dw;
  for (int j = 0; j < 16; ++j) {
    o.u[j] = b.qs[j] & 0x0f;
    o.u[j + 16] = b.qs[j] >> 4;
  }
}

void unpack_q4_1(const uint8_t* p, Unpacked32& o) {
  BlockQ4_1 b;
  std::memcpy(&b, p, sizeof(b));
  o.dw = load_fp16(b.d);
  o.m = load_fp16(b.m);
  for (int j = 0; j < 16; ++j) {
    o.u[j] = b.qs[j] & 0x0f;
    o.u[j + 16] = b.qs[j] >> 4;
  }
}

void unpack_q5_0(const uint8_t* p, Unpacked32& o) {
  BlockQ5_0 b;
  std::memcpy(&b, p, sizeof(b));
  const uint32_t qh = load_u32(b.qh);
  o.dw = load_fp16(b.d);
  o.m = -16.0f * o.dw;
  for (int j = 0; j < 16; ++j) {
    o.u[j] = (b.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    o.u[j + 16] = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

void unpack_q5_1(const uint8_t* p, Unpacked32& o) {
  BlockQ5_1 b;
  std::memcpy(&b, p, sizeof(b));
  const uint32_t qh = load_u32(b.qh);
  o.dw = load_fp16(b.d);
  o.m = load_fp16(b.m);
  for (int j = 0; j < 16; ++j) {
    o.u[j] = (b.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    o.u[j + 16] = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

void unpack_q8_0(const uint8_t* p, Unpacked32& o) {
  BlockQ8_0 b;
  std::memcpy(&b, p, sizeof(b));
  o.dw = load_fp16(b.d);
  o.m = 0.0f;
  for (int j = 0; j < 32; ++j) o.u[j] = b.qs[j];
}

template <void (*Unpack)(const uint8_t*, Unpacked32&), int kBlockBytes>
void tile_q32(const TileArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = a.n_in / kQ8Block;
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* row = a.w + o * a.row_bytes;  // [nb][kBlockBytes]
    for (int64_t t = t0; t < t1; ++t) {
      // x2: rows 2t (q1, scale d1) and 2t+1 (residual q2, scale d1/256); the exact integer
      // 256 * dot1 + dot2 is scaled by d1/256, the mins by both rows' sums.
      const int64_t ra = a.x2 ? 2 * t : t, rl = a.x2 ? ra + 1 : ra;
      const int8_t* qa = a.qs + ra * a.n_in;  // [n_in]
      const int8_t* q2 = a.qs + rl * a.n_in;  // [n_in] (x2)
      const float* da = a.d + rl * nb;        // [nb] scale of the combined dot
      const float* sa = a.s + ra * nb;        // [nb]
      const float* s2 = a.s + rl * nb;        // [nb] (x2)
      float acc = 0.0f;
      Unpacked32 wb;
      for (int64_t b = 0; b < nb; ++b) {
        Unpack(row + b * kBlockBytes, wb);
        int isum = 0, isum2 = 0;
        for (int j = 0; j < kQ8Block; ++j) isum += wb.u[j] * qa[b * kQ8Block + j];
        float msum = sa[b];
        if (a.x2) {
          for (int j = 0; j < kQ8Block; ++j) isum2 += wb.u[j] * q2[b * kQ8Block + j];
          isum = 256 * isum + isum2;
          msum += s2[b];
        }
        acc += wb.dw * da[b] * static_cast<float>(isum) + wb.m * msum;
      }
      a.y[t * a.n_out + o] = acc;
    }
  }
}

// ------------------------------------------------------------------ K-quants

// The 8 (scale, min) pairs of a Q4_K / Q5_K block.
void k4_scales(const uint8_t* packed, int sc[8], int mn[8]) {
  for (int j = 0; j < 8; ++j) {
    uint8_t s8, m8;
    get_scale_min_k4(j, packed, &s8, &m8);
    sc[j] = s8;
    mn[j] = m8;
  }
}

template <bool kFive>
void tile_q45_k(const TileArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = a.n_in / kQ8KBlock;
  constexpr int64_t kBytes = kFive ? sizeof(BlockQ5K) : sizeof(BlockQ4K);
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* row = a.w + o * a.row_bytes;  // [nb][kBytes]
    for (int64_t t = t0; t < t1; ++t) {
      float acc = 0.0f;
      // x2: rows 2t (value) and 2t+1 (residual), each with its own scale, both added.
      const int n_rows = a.x2 ? 2 : 1;
      for (int64_t ar = t * n_rows; ar < (t + 1) * n_rows; ++ar)
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* qa = a.qs + ar * a.n_in + b * kQ8KBlock;       // [256]
        const int16_t* bs = a.bsums + ar * (a.n_in / kQ8KSub) + b * 16;  // [16]
        const uint8_t* p = row + b * kBytes;
        uint16_t dh, dminh;
        std::memcpy(&dh, p, 2);
        std::memcpy(&dminh, p + 2, 2);
        int sc[8], mn[8];
        k4_scales(p + 4, sc, mn);
        const uint8_t* qh = p + 16;                 // [32] (Q5_K only)
        const uint8_t* ql = p + (kFive ? 48 : 16);  // [128]
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
          const uint8_t* q = ql + 32 * (j / 2);
          const int shift = 4 * (j % 2);
          int dot = 0;
          for (int l = 0; l < 32; ++l) {
            int u = (q[l] >> shift) & 0x0f;
            if (kFive) u |= ((qh[l] >> j) & 1) << 4;
            dot += u * qa[32 * j + l];
          }
          isum += sc[j] * dot;
          msum += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
        }
        const float da = a.d[ar * nb + b];
        acc += da * (load_fp16(dh) * static_cast<float>(isum) -
                     load_fp16(dminh) * static_cast<float>(msum));
      }
      a.y[t * a.n_out + o] = acc;
    }
  }
}

void tile_q6_k(const TileArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = a.n_in / kQ8KBlock;
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* row = a.w + o * a.row_bytes;  // [nb][210]
    for (int64_t t = t0; t < t1; ++t) {
      float acc = 0.0f;
      const int n_rows = a.x2 ? 2 : 1;  // x2: value and residual rows, both added
      for (int64_t ar = t * n_rows; ar < (t + 1) * n_rows; ++ar)
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* qa = a.qs + ar * a.n_in + b * kQ8KBlock;  // [256]
        BlockQ6K blk;
        std::memcpy(&blk, row + b * sizeof(BlockQ6K), sizeof(blk));
        int isum = 0;
        for (int half = 0; half < 2; ++half) {
          const uint8_t* ql = blk.ql + 64 * half;  // [64]
          const uint8_t* qh = blk.qh + 32 * half;  // [32]
          int dots[8] = {0};  // [8 sub-blocks of 16] of this half
          for (int l = 0; l < 32; ++l) {
            const int q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            const int8_t* qb = qa + 128 * half + l;
            const int is = l / 16;
            dots[is + 0] += q1 * qb[0];
            dots[is + 2] += q2 * qb[32];
            dots[is + 4] += q3 * qb[64];
            dots[is + 6] += q4 * qb[96];
          }
          for (int i = 0; i < 8; ++i) isum += blk.scales[8 * half + i] * dots[i];
        }
        acc += a.d[ar * nb + b] * load_fp16(blk.d) * static_cast<float>(isum);
      }
      a.y[t * a.n_out + o] = acc;
    }
  }
}

// ------------------------------------------------------------------ float weights

float weight_f32(const uint8_t* row, int64_t i) {
  float v;
  std::memcpy(&v, row + 4 * i, 4);
  return v;
}
float weight_f16(const uint8_t* row, int64_t i) {
  uint16_t h;
  std::memcpy(&h, row + 2 * i, 2);
  return fp16_to_fp32(h);
}
float weight_bf16(const uint8_t* row, int64_t i) {
  uint16_t h;
  std::memcpy(&h, row + 2 * i, 2);
  return bf16_to_fp32(h);
}

template <float (*Load)(const uint8_t*, int64_t)>
void tile_float(const TileArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  for (int64_t o = r0; o < r1; ++o) {
    const uint8_t* row = a.w + o * a.row_bytes;
    for (int64_t t = t0; t < t1; ++t) {
      const float* x = a.x + t * a.n_in;  // [n_in]
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      int64_t i = 0;
      for (; i + 4 <= a.n_in; i += 4)
        for (int k = 0; k < 4; ++k) acc[k] += Load(row, i + k) * x[i + k];
      for (; i < a.n_in; ++i) acc[0] += Load(row, i) * x[i];
      a.y[t * a.n_out + o] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
  }
}

}  // namespace

void fill_kernels_scalar(KernelSet& ks) {
  ks.quantize_q8 = quantize_q8_scalar;
  ks.quantize_q8k = quantize_q8k_scalar;
  ks.f32 = tile_float<weight_f32>;
  ks.f16 = tile_float<weight_f16>;
  ks.bf16 = tile_float<weight_bf16>;
  ks.q4_0 = tile_q32<unpack_q4_0, sizeof(BlockQ4_0)>;
  ks.q4_1 = tile_q32<unpack_q4_1, sizeof(BlockQ4_1)>;
  ks.q5_0 = tile_q32<unpack_q5_0, sizeof(BlockQ5_0)>;
  ks.q5_1 = tile_q32<unpack_q5_1, sizeof(BlockQ5_1)>;
  ks.q8_0 = tile_q32<unpack_q8_0, sizeof(BlockQ8_0)>;
  ks.q4_k = tile_q45_k<false>;
  ks.q5_k = tile_q45_k<true>;
  ks.q6_k = tile_q6_k;
}

}  // namespace hs::cpu::detail
