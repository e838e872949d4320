// kv/kv_quant.cpp — dtype names, layouts, the scalar row encoders and the kernel dispatch
// (see kv_quant.h). Encoding is scalar and runs once per written row.
#include "kv/kv_quant.h"

#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "kv/kv_quant_kernel.h"

namespace hs {

const char* kv_store_dtype_name(KvStoreDtype t) {
  switch (t) {
    case KvStoreDtype::kF32: return "f32";
    case KvStoreDtype::kF16: return "f16";
    case KvStoreDtype::kBF16: return "bf16";
    case KvStoreDtype::kInt8: return "int8";
    case KvStoreDtype::kInt4: return "int4";
    case KvStoreDtype::kFp8: return "fp8";
  }
  return "?";
}

Result<KvStoreDtype> parse_kv_store_dtype(std::string_view name) {
  if (name == "auto" || name == "f16") return KvStoreDtype::kF16;
  if (name == "f32") return KvStoreDtype::kF32;
  if (name == "bf16") return KvStoreDtype::kBF16;
  if (name == "int8") return KvStoreDtype::kInt8;
  if (name == "int4") return KvStoreDtype::kInt4;
  if (name == "fp8") return KvStoreDtype::kFp8;
  return make_error(StatusCode::kInvalidArgument,
                    "unknown --kv-cache-dtype '{}' (supported: auto, f32, f16, bf16, int8, int4, fp8)", name);
}

int64_t kv_row_bytes(KvStoreDtype t, int head_dim) {
  switch (t) {
    case KvStoreDtype::kF32: return 4LL * head_dim;
    case KvStoreDtype::kF16:
    case KvStoreDtype::kBF16: return 2LL * head_dim;
    case KvStoreDtype::kInt8:
    case KvStoreDtype::kFp8: return head_dim;
    case KvStoreDtype::kInt4: return head_dim / 2;
  }
  return 0;
}

int kv_scale_bytes(KvStoreDtype t) {
  return t == KvStoreDtype::kInt8 || t == KvStoreDtype::kFp8 ? 2 : t == KvStoreDtype::kInt4 ? 4 : 0;
}

PieceLayout PieceLayout::make(KvStoreDtype t, int head_dim, int chunk_tokens) {
  PieceLayout p;
  p.dtype = t;
  p.head_dim = head_dim;
  p.chunk_tokens = chunk_tokens;
  p.row_bytes = kv_row_bytes(t, head_dim);
  p.scale_bytes = kv_scale_bytes(t);
  p.scales_offset = 2LL * chunk_tokens * p.row_bytes;
  p.bytes = p.scales_offset + 2LL * chunk_tokens * p.scale_bytes;
  p.stride = (p.bytes + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
  return p;
}

Result<HostPageLayout> HostPageLayout::make(KvStoreDtype t, int n_kv_heads, int head_dim, int page_tokens,
                                            int chunk_tokens) {
  if (n_kv_heads <= 0 || head_dim <= 0 || head_dim > kvq_detail::kMaxHeadDim)
    return make_error(StatusCode::kInvalidArgument, "kv tiers: bad geometry n_kv_heads={} head_dim={}", n_kv_heads,
                      head_dim);
  if (t == KvStoreDtype::kInt4 && head_dim % 2 != 0)
    return make_error(StatusCode::kInvalidArgument, "kv tiers: int4 needs an even head_dim (got {})", head_dim);
  if (chunk_tokens <= 0 || chunk_tokens > 64 || page_tokens <= 0 || page_tokens % chunk_tokens != 0)
    return make_error(StatusCode::kInvalidArgument,
                      "kv tiers: chunk size {} must be in [1, 64] and divide the page size {}", chunk_tokens,
                      page_tokens);
  HostPageLayout L;
  L.piece = PieceLayout::make(t, head_dim, chunk_tokens);
  L.n_kv_heads = n_kv_heads;
  L.page_tokens = page_tokens;
  L.chunks_per_page = page_tokens / chunk_tokens;
  L.page_bytes = static_cast<int64_t>(n_kv_heads) * L.chunks_per_page * L.piece.stride;
  return L;
}

uint8_t fp8_e4m3_from_float(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;                // NaN: canonical, sign dropped (as CUDA)
  if (a >= 0x43e00000u) return sign | 0x7e;        // >= 448 (and inf): saturate
  if (a >= 0x3c800000u) {                          // >= 2^-6: a normal e4m3
    const uint32_t e = (a >> 23) - 127 + 7;        // 1..15
    const uint32_t m = (a >> 20) & 7u;             // top 3 mantissa bits, truncated
    const uint32_t rest = a & 0xfffffu;            // the 20 dropped bits
    uint32_t r = (e << 3) | m;
    if (rest > 0x80000u || (rest == 0x80000u && (m & 1u))) ++r;  // nearest even; a carry bumps e
    return static_cast<uint8_t>(sign | r);         // (448, 464) rounds down to 0x7e: never 0x7f
  }
  // Below 2^-6: k · 2^-9 with k = round-to-even(|x| · 2^9) in 0..8 (8 is the smallest normal,
  // byte 0x08); |x| ≤ 2^-10 gives ±0. The scaling by 2^9 is exact.
  float ax;
  std::memcpy(&ax, &a, 4);
  const float k = std::nearbyint(ax * 512.0f);
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(k));
}

float fp8_e4m3_to_float(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -9);
  } else {
    v = std::ldexp(static_cast<float>(8 + m), e - 10);
  }
  return (b & 0x80) ? -v : v;
}

void kv_encode_row(KvStoreDtype t, const float* x, int hd, void* row_v, void* scale_v) {
  uint8_t* row = static_cast<uint8_t*>(row_v);
  uint16_t* scale = static_cast<uint16_t*>(scale_v);
  switch (t) {
    case KvStoreDtype::kF32:
      std::memcpy(row, x, static_cast<size_t>(hd) * 4);
      return;
    case KvStoreDtype::kF16:
    case KvStoreDtype::kBF16: {
      const bool bf = t == KvStoreDtype::kBF16;
      for (int d = 0; d < hd; ++d) {
        const uint16_t h = bf ? fp32_to_bf16(x[d]) : fp32_to_fp16(x[d]);
        std::memcpy(row + 2 * d, &h, 2);
      }
      return;
    }
    case KvStoreDtype::kInt8: {
      float amax = 0.0f;
      for (int d = 0; d < hd; ++d) amax = std::fmax(amax, std::fabs(x[d]));
      // Quantize against the stored (f16-rounded) scale so decode uses the same number.
      const uint16_t dh = fp32_to_fp16(amax / 127.0f);
      const float df = fp16_to_fp32(dh);
      const float inv = df > 0.0f ? 1.0f / df : 0.0f;
      int8_t* q = reinterpret_cast<int8_t*>(row);
      for (int d = 0; d < hd; ++d) {
        const float r = std::nearbyint(x[d] * inv);
        q[d] = static_cast<int8_t>(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
      }
      std::memcpy(scale, &dh, 2);
      return;
    }
    case KvStoreDtype::kInt4: {
      float mn = x[0], mx = x[0];
      for (int d = 1; d < hd; ++d) {
        mn = std::fmin(mn, x[d]);
        mx = std::fmax(mx, x[d]);
      }
      const uint16_t dh = fp32_to_fp16((mx - mn) / 15.0f), mh = fp32_to_fp16(mn);
      const float df = fp16_to_fp32(dh), mf = fp16_to_fp32(mh);
      const float inv = df > 0.0f ? 1.0f / df : 0.0f;
      const int h = hd / 2;
      auto q4 = [&](float v) {
        const float r = std::nearbyint((v - mf) * inv);
        return static_cast<uint8_t>(r > 15.0f ? 15.0f : r < 0.0f ? 0.0f : r);
      };
      for (int j = 0; j < h; ++j) row[j] = static_cast<uint8_t>(q4(x[j]) | (q4(x[j + h]) << 4));
      std::memcpy(scale, &dh, 2);
      std::memcpy(scale + 1, &mh, 2);
      return;
    }
    case KvStoreDtype::kFp8: {
      // backend/cuda/attention.cu (kv_write_fp8_kernel) does exactly this arithmetic.
      float amax = 0.0f;
      for (int d = 0; d < hd; ++d) amax = std::fmax(amax, std::fabs(x[d]));
      const uint16_t dh = fp32_to_fp16(std::fmin(amax / 448.0f, 65504.0f));
      std::memcpy(scale, &dh, 2);
      const float df = fp16_to_fp32(dh);
      if (!(df > 0.0f)) {
        std::memset(row, 0, static_cast<size_t>(hd));
        return;
      }
      const float inv = 1.0f / df;
      for (int d = 0; d < hd; ++d) row[d] = fp8_e4m3_from_float(x[d] * inv);
      return;
    }
  }
}

void kv_decode_row(KvStoreDtype t, const void* row, const void* scale, int hd, float* y) {
  kvq_detail::decode_row_k(t, static_cast<const uint8_t*>(row), static_cast<const uint8_t*>(scale), hd, y);
}

namespace {

kvq_detail::KvQuantKernels pick() {
  const char* force = std::getenv("HS_SIMD");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  if (force && std::strcmp(force, "scalar") == 0) return kvq_detail::make_kernels("scalar");
  if (avx512 && !(force && std::strcmp(force, "avx2") == 0)) return kvq_detail::kernels_avx512();
  if (avx2) return kvq_detail::kernels_avx2();
  return kvq_detail::make_kernels("scalar");
}

const kvq_detail::KvQuantKernels& kernels() {
  static const kvq_detail::KvQuantKernels k = pick();
  return k;
}

}  // namespace

float kv_dot(KvStoreDtype t, const float* q, const void* row, const void* scale, int hd) {
  return kernels().dot(t, q, row, scale, hd);
}

void kv_axpy(KvStoreDtype t, float w, const void* row, const void* scale, float* acc, int hd) {
  kernels().axpy(t, w, row, scale, acc, hd);
}

void kv_piece_scores(const PieceView& piece, int t0, int n, const float* q, int n_q, float scale, float* scores) {
  assert(t0 >= 0 && t0 + n <= piece.layout->chunk_tokens);
  kernels().scores(piece, t0, n, q, n_q, scale, scores);
}

void kv_piece_accumulate(const PieceView& piece, int t0, int n, const float* p, int n_q, float* acc) {
  assert(t0 >= 0 && t0 + n <= piece.layout->chunk_tokens);
  kernels().accumulate(piece, t0, n, p, n_q, acc);
}

void kv_attend_pieces(const float* q, int n_q, const PieceSpan* spans, int n_spans, float scale, float* max,
                      float* sum, float* acc) {
  assert(n_q <= kPieceAttnMaxGroup);
  kernels().attend(q, n_q, spans, n_spans, scale, max, sum, acc);
}

const char* kv_quant_simd_level() { return kernels().name; }

}  // namespace hs
