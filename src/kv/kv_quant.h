// kv/kv_quant.h — storage formats of the KV tiers: per-token-per-head quantized rows, the
// piece (one kv head's chunk of C tokens) and the host page built from pieces, and the fused
// dot / axpy / attention kernels that run directly on stored rows.
//
// A row is one token's K or V of one kv head, [head_dim] values:
//   f32, f16, bf16  plain elements, no scale;
//   int8            q[d] int8, x ≈ d_h · q                (d_h = f16(max|x| / 127));
//   int4            u[d] 4-bit, x ≈ m_h + d_h · u, u ∈ [0, 15]  (d_h = f16((max − min) / 15),
//                   m_h = f16(min)); byte j holds element j (low nibble) and element
//                   j + head_dim/2 (high nibble), so unpacking is two vector ops;
//   fp8             e[d] OCP FP8 E4M3 bytes, x ≈ d_h · e4m3(e)   (d_h = f16(max|x| / 448)).
// fp8 in detail (the CPU is the reference; backend/cuda/attention.cu writes the same bytes):
//   E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, NaN = 0x7F / 0xFF,
//   largest finite ±448 (0x7E / 0xFE), smallest subnormal 2^-9 (0x01). Value of byte
//   (s, e, m): e > 0: ±(1 + m/8)·2^(e−7); e = 0: ±m·2^-9.
//   Encode a row: amax = max|x| (NaN elements ignored); d_h = f16(min(amax / 448, 65504)),
//   round to nearest even; if d_h == 0 every byte is 0. Else inv = 1 / float(d_h) and
//   e = e4m3(x · inv) in fp32, rounded to nearest even with saturation to ±448 (CUDA's
//   __nv_cvt_float_to_fp8(·, __NV_SATFINITE, __NV_E4M3) / cvt.rn.satfinite.e4m3x2.f32:
//   |s| ≥ 448 or ±inf → ±448, |s| ≤ 2^-10 → ±0 (0x00 / 0x80), NaN → 0x7F).
//   Decode: float(d_h) · e4m3 — exact in fp32 (4 × 11 significant bits), so every kernel
//   (LUT, the f16 bit trick of the SIMD loads, CUDA's cvt.f16x2.e4m3x2) gets the same floats.
//   Error per element (KvQuant.RoundTripErrorBounds): ≤ 2^-4·|x| (3 mantissa bits; really
//   ≤ |x|/17) in e4m3's normal range, ≤ d_h·2^-10 ≈ max|x|·2^-18.8 below it, plus ≤ 448·2^-25
//   absolute where d_h is an f16 subnormal (rows with max|x| < 448·2^-14 ≈ 0.027).
//   Against int8 (same bytes): the error is relative to each element, not to the row's max,
//   so rows with an outlier channel come out ~3x more accurate and Gaussian rows ~4x less
//   (RMS, KvQuantFp8.ErrorAgainstInt8; docs/kv-tiers.md).
// int4 is asymmetric: its error bound (max − min)/30 is never worse than the symmetric
// max|x|/14 and is half of it on skewed rows (docs/kv-tiers.md has the measurements).
//
// A piece is [C][K|V][row_bytes] data followed by [C][K|V][scale_bytes] scales, padded to
// 16 bytes: the unit the device tier fetches, contiguous so one copy moves it. A page of
// P tokens is [n_kv_heads][P/C] pieces; with C = P and no scales (f32/f16) it is exactly
// kv/kv_cache.h's [n_kv_heads][P][K|V][head_dim].
//
// Cost: encoding is scalar (one row per token per layer per head, negligible next to the
// matmuls); the read kernels are compiled per ISA (kv_quant_kernel.h, dispatched at run
// time like backend/cpu; HS_SIMD=scalar|avx2 forces a level). int8 and fp8 read ~half, int4
// ~a quarter of f16's bytes per key; attention over pieces runs at ~the dense f16 kernel's
// token rate for every dtype but fp8, whose decode (16 bytes → f16 bits → f32, ~11 vector
// ops on AVX2 / AVX-512; a 256-entry table on the scalar path) costs 15–25 % of the rate
// on cache-resident pieces (docs/kv-tiers.md).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace hs {

enum class KvStoreDtype : uint8_t { kF32, kF16, kBF16, kInt8, kInt4, kFp8 };

const char* kv_store_dtype_name(KvStoreDtype t);
// "auto" (= f16, the models' activation precision), "f32", "f16", "bf16", "int8", "int4", "fp8".
Result<KvStoreDtype> parse_kv_store_dtype(std::string_view name);

// Bytes of one encoded row of head_dim values (head_dim must be even for int4).
int64_t kv_row_bytes(KvStoreDtype t, int head_dim);
// Bytes of one row's scale block: 0 (f32/f16/bf16), 2 (int8, fp8: f16 d), 4 (int4: f16 d, f16 m).
int kv_scale_bytes(KvStoreDtype t);

// ---- fp8 e4m3 scalars (bit-exact with CUDA's __NV_SATFINITE conversions, see above) ------
uint8_t fp8_e4m3_from_float(float x);  // round to nearest even, saturating to ±448
float fp8_e4m3_to_float(uint8_t b);    // exact; 0x7F / 0xFF → NaN

// ---- rows ----------------------------------------------------------------------------
// Encode x [head_dim] into row (kv_row_bytes) and scale (kv_scale_bytes; may be null when 0).
void kv_encode_row(KvStoreDtype t, const float* x, int head_dim, void* row, void* scale);
// Decode back to floats y [head_dim].
void kv_decode_row(KvStoreDtype t, const void* row, const void* scale, int head_dim, float* y);
// Fused, dispatched: q · decode(row), and acc += w · decode(row). Exactly the float math of
// decoding first, up to summation order.
float kv_dot(KvStoreDtype t, const float* q, const void* row, const void* scale, int head_dim);
void kv_axpy(KvStoreDtype t, float w, const void* row, const void* scale, float* acc, int head_dim);

// ---- pieces and pages ------------------------------------------------------------------
inline constexpr int kPieceAlign = 16;  // piece stride alignment (one 128-bit load)

// One kv head's chunk of C tokens:
//   data   [C][K|V][row_bytes]       at offset 0
//   scales [C][K|V][scale_bytes]     at scales_offset (== data bytes)
//   padding to `stride` (a multiple of kPieceAlign)
struct PieceLayout {
  KvStoreDtype dtype = KvStoreDtype::kF16;
  int head_dim = 0;
  int chunk_tokens = 16;   // C
  int64_t row_bytes = 0;   // one K or V row
  int scale_bytes = 0;     // one row's scales
  int64_t scales_offset = 0;
  int64_t bytes = 0;       // data + scales: what a fetch moves
  int64_t stride = 0;      // bytes rounded up to kPieceAlign: distance between pieces

  static PieceLayout make(KvStoreDtype t, int head_dim, int chunk_tokens);
  // kv: 0 = K, 1 = V. `t` is the token within the piece.
  int64_t row_offset(int t, int kv) const { return (static_cast<int64_t>(t) * 2 + kv) * row_bytes; }
  int64_t scale_offset(int t, int kv) const {
    return scales_offset + (static_cast<int64_t>(t) * 2 + kv) * scale_bytes;
  }
};

// A page of P tokens of one layer: [n_kv_heads][P / C] pieces.
struct HostPageLayout {
  PieceLayout piece;
  int n_kv_heads = 0;
  int page_tokens = 16;      // P
  int chunks_per_page = 1;   // P / C
  int64_t page_bytes = 0;    // n_kv_heads * chunks_per_page * piece.stride

  // Validates: head_dim > 0 (even for int4), C divides P, C <= 64.
  static Result<HostPageLayout> make(KvStoreDtype t, int n_kv_heads, int head_dim, int page_tokens,
                                     int chunk_tokens);
  int64_t piece_offset(int head, int chunk_in_page) const {
    return (static_cast<int64_t>(head) * chunks_per_page + chunk_in_page) * piece.stride;
  }
  // Byte offsets inside the page of token `t` (0..P-1) of `head`: its K (kv=0) or V row,
  // and that row's scales.
  int64_t row_offset(int head, int t, int kv) const {
    return piece_offset(head, t / piece.chunk_tokens) + piece.row_offset(t % piece.chunk_tokens, kv);
  }
  int64_t scale_offset(int head, int t, int kv) const {
    return piece_offset(head, t / piece.chunk_tokens) + piece.scale_offset(t % piece.chunk_tokens, kv);
  }
};

// Read access to one stored piece (host page or device slot): what attention iterates.
struct PieceView {
  const uint8_t* base = nullptr;       // [piece.bytes] as in PieceLayout
  const PieceLayout* layout = nullptr;
  const uint8_t* k_row(int t) const { return base + layout->row_offset(t, 0); }
  const uint8_t* v_row(int t) const { return base + layout->row_offset(t, 1); }
  const uint8_t* k_scale(int t) const { return base + layout->scale_offset(t, 0); }
  const uint8_t* v_scale(int t) const { return base + layout->scale_offset(t, 1); }
};

// One piece of an attention's keys: tokens [first, n_valid) take part (first > 0 only where
// a range starts inside a page, e.g. a sliding window).
struct PieceSpan {
  PieceView view;
  int32_t n_valid = 0;
  int32_t first = 0;
};
inline constexpr int kPieceAttnMaxGroup = 32;  // query heads per kv_attend_pieces call

// GQA-group kernels over tokens [t0, t0 + n) of a piece; each K / V row is decoded once
// for all n_q query heads.
//   scores [n_q][n]: scores[g * n + j] = scale * q_g · K_{t0+j};  q: [n_q][head_dim]
void kv_piece_scores(const PieceView& piece, int t0, int n, const float* q, int n_q, float scale, float* scores);
//   acc [n_q][head_dim] += sum_j p[g * n + j] * V_{t0+j};  p: [n_q][n]
void kv_piece_accumulate(const PieceView& piece, int t0, int n, const float* p, int n_q, float* acc);

// Exact softmax attention of n_q query heads (q [n_q][head_dim]) over the valid tokens of
// n_spans pieces (all of one layout), one pass with an online softmax. Writes a partial in
// backend/cpu/attention.h's convention: max [n_q], sum [n_q] of exp(score - max), acc
// [n_q][head_dim] unnormalized. head_dim 64/128/256 with n_q <= 16 keep the group's
// queries and outputs in registers; other shapes use kv_piece_scores / _accumulate.
void kv_attend_pieces(const float* q, int n_q, const PieceSpan* spans, int n_spans, float scale, float* max,
                      float* sum, float* acc);

// The SIMD level the kernels dispatched to ("avx512", "avx2", "scalar"; HS_SIMD forces).
const char* kv_quant_simd_level();

}  // namespace hs
