// tests/unit/kv/test_kv_quant.cpp — per-token-per-head KV row formats: round-trip error
// bounds, fused dot / axpy and the GQA piece kernels against decode-then-float references,
// piece and page layouts, and the fp8 e4m3 scalar codec bit for bit (known encodings,
// ties, saturation, a brute-force nearest-even reference; CUDA's own conversion is compared
// in tests/ops/test_backend_ops.cpp). Every test draws fresh random inputs (the seed is printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kv/kv_quant.h"

namespace hs {
namespace {

constexpr KvStoreDtype kAll[] = {KvStoreDtype::kF32,  KvStoreDtype::kF16,  KvStoreDtype::kBF16,
                                 KvStoreDtype::kInt8, KvStoreDtype::kInt4, KvStoreDtype::kFp8};

uint32_t fresh_seed() {
  const uint32_t s = std::random_device{}();
  std::printf("[ seed ] %u\n", s);
  return s;
}

// Rows of several shapes: centred Gaussian, Gaussian with an offset (skewed), heavy-tailed
// with an outlier channel, tiny magnitudes, and a constant row.
std::vector<float> random_row(std::mt19937& rng, int hd, int kind) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(hd);
  for (float& v : x) v = nd(rng);
  switch (kind % 5) {
    case 1:
      for (float& v : x) v = 0.5f * v + 3.0f;
      break;
    case 2:
      x[rng() % hd] = 40.0f * (rng() % 2 ? 1.0f : -1.0f);
      break;
    case 3:
      for (float& v : x) v *= 1e-3f;
      break;
    case 4:
      std::fill(x.begin(), x.end(), 2.5f);
      break;
    default:
      break;
  }
  return x;
}

struct Encoded {
  std::vector<uint8_t> row, scale;
};

Encoded encode(KvStoreDtype t, const std::vector<float>& x) {
  const int hd = static_cast<int>(x.size());
  Encoded e{std::vector<uint8_t>(kv_row_bytes(t, hd)), std::vector<uint8_t>(4)};
  kv_encode_row(t, x.data(), hd, e.row.data(), e.scale.data());
  return e;
}

std::vector<float> decode(KvStoreDtype t, const Encoded& e, int hd) {
  std::vector<float> y(hd);
  kv_decode_row(t, e.row.data(), e.scale.data(), hd, y.data());
  return y;
}

TEST(KvQuant, RoundTripErrorBounds) {
  std::mt19937 rng(fresh_seed());
  for (int hd : {64, 128, 256, 80}) {
    for (int kind = 0; kind < 5; ++kind) {
      for (int rep = 0; rep < 40; ++rep) {
        const std::vector<float> x = random_row(rng, hd, kind);
        float amax = 0, mn = x[0], mx = x[0];
        for (float v : x) {
          amax = std::max(amax, std::fabs(v));
          mn = std::min(mn, v);
          mx = std::max(mx, v);
        }
        for (KvStoreDtype t : kAll) {
          const std::vector<float> y = decode(t, encode(t, x), hd);
          for (int d = 0; d < hd; ++d) {
            const float err = std::fabs(y[d] - x[d]);
            SCOPED_TRACE(testing::Message() << kv_store_dtype_name(t) << " hd=" << hd << " kind=" << kind
                                            << " d=" << d << " x=" << x[d] << " y=" << y[d]);
            switch (t) {
              case KvStoreDtype::kF32: ASSERT_EQ(err, 0.0f); break;
              case KvStoreDtype::kF16: ASSERT_LE(err, std::fabs(x[d]) * 0x1p-11f + 0x1p-24f); break;
              case KvStoreDtype::kBF16: ASSERT_LE(err, std::fabs(x[d]) * 0x1p-8f); break;
              case KvStoreDtype::kInt8:
                ASSERT_LE(err, amax / 127.0f);                      // the contract
                ASSERT_LE(err, amax * (0.5f / 127.0f + 0x1p-11f));  // what rounding gives
                break;
              case KvStoreDtype::kInt4:
                ASSERT_LE(err, amax / 7.0f);                                         // the contract
                ASSERT_LE(err, (mx - mn) / 30.0f * (1.0f + 0x1p-10f) + amax * 0x1p-10f);  // asymmetric
                break;
              case KvStoreDtype::kFp8:
                // 3 mantissa bits: half an ulp is <= 2^-4 |x| in e4m3's normal range; below it
                // (|x| < 2^-6 d) the step is d·2^-9; an f16-subnormal scale (max|x| < ~0.027)
                // costs at most 448·2^-25 absolute (saturation against a rounded-down d).
                ASSERT_LE(err, std::fabs(x[d]) * 0x1p-4f + amax * 0x1p-18f + 448.0f * 0x1p-25f);
                break;
            }
          }
        }
      }
    }
  }
}

// Fused dot and axpy equal decode-then-float math (to summation order).
TEST(KvQuant, DotAndAxpyMatchDecodedReference) {
  std::mt19937 rng(fresh_seed());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::printf("[ simd ] %s\n", kv_quant_simd_level());
  for (int hd : {64, 128, 256, 96, 6}) {
    for (KvStoreDtype t : kAll) {
      for (int rep = 0; rep < 50; ++rep) {
        const std::vector<float> x = random_row(rng, hd, rep);
        const Encoded e = encode(t, x);
        const std::vector<float> y = decode(t, e, hd);
        std::vector<float> q(hd), acc(hd), ref(hd);
        for (int d = 0; d < hd; ++d) acc[d] = ref[d] = nd(rng);
        for (float& v : q) v = nd(rng);
        // Error scale: the fused int4 forms d·(q·u) + m·Σq and (w·m) + (w·d)·u cancel
        // terms of size |m| ≤ max|y|, so rounding is relative to Σ|q|·max|y|, not |q·y|.
        double dot = 0, qabs = 0, yabs = 0;
        for (int d = 0; d < hd; ++d) {
          dot += static_cast<double>(q[d]) * y[d];
          qabs += std::fabs(q[d]);
          yabs = std::max(yabs, static_cast<double>(std::fabs(y[d])));
        }
        SCOPED_TRACE(testing::Message() << kv_store_dtype_name(t) << " hd=" << hd << " rep=" << rep);
        EXPECT_NEAR(kv_dot(t, q.data(), e.row.data(), e.scale.data(), hd), dot, 2e-6 * qabs * yabs + 1e-30);
        const float w = nd(rng);
        kv_axpy(t, w, e.row.data(), e.scale.data(), acc.data(), hd);
        for (int d = 0; d < hd; ++d)
          ASSERT_NEAR(acc[d], ref[d] + w * y[d], 2e-6f * (std::fabs(ref[d]) + std::fabs(w) * yabs) + 1e-30f);
      }
    }
  }
}

TEST(KvQuant, PieceAndPageLayouts) {
  // f16 with C == P and no scales is kv_cache.h's [n_kv_heads][P][K|V][head_dim].
  auto f16 = HostPageLayout::make(KvStoreDtype::kF16, 4, 64, 16, 16);
  ASSERT_TRUE(f16.is_ok());
  EXPECT_EQ(f16->page_bytes, 4LL * 16 * 2 * 64 * 2);
  EXPECT_EQ(f16->row_offset(2, 5, 1), ((2LL * 16 + 5) * 2 + 1) * 64 * 2);
  // int8: data then scales inside each piece; pieces padded to 16 bytes.
  auto i8 = HostPageLayout::make(KvStoreDtype::kInt8, 2, 64, 32, 16);
  ASSERT_TRUE(i8.is_ok());
  EXPECT_EQ(i8->chunks_per_page, 2);
  EXPECT_EQ(i8->piece.bytes, 16 * 2 * 64 + 16 * 2 * 2);
  EXPECT_EQ(i8->piece.stride % kPieceAlign, 0);
  EXPECT_EQ(i8->piece_offset(1, 1), 3 * i8->piece.stride);
  EXPECT_EQ(i8->row_offset(1, 17, 0), 3 * i8->piece.stride + 2 * 64);
  EXPECT_EQ(i8->scale_offset(1, 17, 1), 3 * i8->piece.stride + 16 * 2 * 64 + 3 * 2);
  // int4: head_dim/2 bytes per row, 4 scale bytes (d, m).
  auto i4 = HostPageLayout::make(KvStoreDtype::kInt4, 1, 256, 16, 16);
  ASSERT_TRUE(i4.is_ok());
  EXPECT_EQ(i4->piece.bytes, 16 * 2 * 128 + 16 * 2 * 4);
  // Every byte of a page belongs to exactly one (head, token, K|V) row or scale, or padding.
  for (KvStoreDtype t : kAll) {
    auto L = HostPageLayout::make(t, 3, 64, 32, 8);
    ASSERT_TRUE(L.is_ok());
    std::vector<int> owner(L->page_bytes, 0);
    for (int h = 0; h < 3; ++h)
      for (int tok = 0; tok < 32; ++tok)
        for (int kv = 0; kv < 2; ++kv) {
          for (int64_t b = 0; b < L->piece.row_bytes; ++b) ++owner[L->row_offset(h, tok, kv) + b];
          for (int b = 0; b < L->piece.scale_bytes; ++b) ++owner[L->scale_offset(h, tok, kv) + b];
        }
    for (int v : owner) ASSERT_LE(v, 1) << kv_store_dtype_name(t);
  }
  EXPECT_FALSE(HostPageLayout::make(KvStoreDtype::kInt4, 1, 63, 16, 16).is_ok());
  EXPECT_FALSE(HostPageLayout::make(KvStoreDtype::kF16, 1, 64, 16, 12).is_ok());
  // fp8: int8's geometry (one byte per element, one f16 scale per row).
  auto f8 = HostPageLayout::make(KvStoreDtype::kFp8, 2, 64, 32, 16);
  ASSERT_TRUE(f8.is_ok());
  EXPECT_EQ(f8->piece.bytes, i8->piece.bytes);
  EXPECT_EQ(f8->piece.stride, i8->piece.stride);
  EXPECT_EQ(f8->scale_offset(1, 17, 1), i8->scale_offset(1, 17, 1));
  EXPECT_TRUE(parse_kv_store_dtype("auto").is_ok());
  EXPECT_EQ(*parse_kv_store_dtype("int4"), KvStoreDtype::kInt4);
  EXPECT_EQ(*parse_kv_store_dtype("fp8"), KvStoreDtype::kFp8);
  EXPECT_STREQ(kv_store_dtype_name(KvStoreDtype::kFp8), "fp8");
  EXPECT_EQ(kv_scale_bytes(KvStoreDtype::kFp8), 2);
  EXPECT_EQ(kv_row_bytes(KvStoreDtype::kFp8, 128), 128);
  EXPECT_FALSE(parse_kv_store_dtype("q4_0").is_ok());
}

// GQA piece kernels: scores and V accumulation for several query heads at once.
TEST(KvQuant, PieceKernelsMatchReference) {
  std::mt19937 rng(fresh_seed());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int C = 16;
  for (int hd : {64, 256, 48}) {
    for (KvStoreDtype t : kAll) {
      const PieceLayout L = PieceLayout::make(t, hd, C);
      std::vector<uint8_t> buf(L.stride);
      std::vector<float> k(static_cast<size_t>(C) * hd), v(k.size());  // [C][hd] decoded
      for (int tok = 0; tok < C; ++tok) {
        const std::vector<float> kx = random_row(rng, hd, tok), vx = random_row(rng, hd, tok + 1);
        kv_encode_row(t, kx.data(), hd, buf.data() + L.row_offset(tok, 0), buf.data() + L.scale_offset(tok, 0));
        kv_encode_row(t, vx.data(), hd, buf.data() + L.row_offset(tok, 1), buf.data() + L.scale_offset(tok, 1));
        kv_decode_row(t, buf.data() + L.row_offset(tok, 0), buf.data() + L.scale_offset(tok, 0), hd, &k[tok * hd]);
        kv_decode_row(t, buf.data() + L.row_offset(tok, 1), buf.data() + L.scale_offset(tok, 1), hd, &v[tok * hd]);
      }
      const PieceView pv{buf.data(), &L};
      const int n_q = 3, t0 = 5, n = 9;
      std::vector<float> q(n_q * hd), p(n_q * n), scores(n_q * n), acc(n_q * hd, 0.0f);
      for (float& x : q) x = nd(rng);
      for (float& x : p) x = std::fabs(nd(rng));
      kv_piece_scores(pv, t0, n, q.data(), n_q, 0.125f, scores.data());
      kv_piece_accumulate(pv, t0, n, p.data(), n_q, acc.data());
      SCOPED_TRACE(testing::Message() << kv_store_dtype_name(t) << " hd=" << hd);
      for (int g = 0; g < n_q; ++g) {
        for (int j = 0; j < n; ++j) {
          double ref = 0, mag = 0;
          for (int d = 0; d < hd; ++d) {
            ref += 0.125 * q[g * hd + d] * k[(t0 + j) * hd + d];
            mag += std::fabs(0.125 * q[g * hd + d] * k[(t0 + j) * hd + d]);
          }
          ASSERT_NEAR(scores[g * n + j], ref, 2e-6 * mag + 1e-30);
        }
        for (int d = 0; d < hd; ++d) {
          double ref = 0, mag = 0;
          for (int j = 0; j < n; ++j) {
            ref += static_cast<double>(p[g * n + j]) * v[(t0 + j) * hd + d];
            mag += std::fabs(static_cast<double>(p[g * n + j]) * v[(t0 + j) * hd + d]);
          }
          ASSERT_NEAR(acc[g * hd + d], ref, 2e-6 * mag + 1e-30);
        }
      }
    }
  }
}

// Attention over pieces (fixed head_dim kernel and the generic one) against float softmax
// attention over the decoded rows [first, n_valid) of each piece.
TEST(KvQuant, AttendPiecesMatchesReference) {
  std::mt19937 rng(fresh_seed());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int C = 16, n_pieces = 7;
  for (int hd : {64, 128, 256, 48}) {
    for (int n_q : {1, 4, 20}) {
      for (KvStoreDtype t : kAll) {
        const PieceLayout L = PieceLayout::make(t, hd, C);
        std::vector<uint8_t> buf(static_cast<size_t>(n_pieces) * L.stride);
        std::vector<PieceSpan> spans;
        std::vector<std::vector<float>> ks, vs;  // decoded valid rows, in order
        for (int p = 0; p < n_pieces; ++p) {
          uint8_t* base = buf.data() + static_cast<int64_t>(p) * L.stride;
          const int n_valid = p == 3 ? 0 : 1 + static_cast<int>(rng() % C);
          // Odd pieces start inside (a range that begins mid-page, e.g. a sliding window).
          const int first = p % 2 == 1 && n_valid > 0 ? static_cast<int>(rng() % n_valid) : 0;
          for (int tok = 0; tok < C; ++tok)
            for (int kv = 0; kv < 2; ++kv) {
              std::vector<float> x = random_row(rng, hd, static_cast<int>(rng() % 4));
              kv_encode_row(t, x.data(), hd, base + L.row_offset(tok, kv), base + L.scale_offset(tok, kv));
              if (tok < first || tok >= n_valid) continue;
              kv_decode_row(t, base + L.row_offset(tok, kv), base + L.scale_offset(tok, kv), hd, x.data());
              (kv == 0 ? ks : vs).push_back(x);
            }
          spans.push_back({PieceView{base, &L}, n_valid, first});
        }
        std::vector<float> q(static_cast<size_t>(n_q) * hd), mx(n_q), sm(n_q), acc(static_cast<size_t>(n_q) * hd);
        for (float& x : q) x = 0.3f * nd(rng);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        kv_attend_pieces(q.data(), n_q, spans.data(), n_pieces, scale, mx.data(), sm.data(), acc.data());
        SCOPED_TRACE(testing::Message() << kv_store_dtype_name(t) << " hd=" << hd << " n_q=" << n_q);
        for (int g = 0; g < n_q; ++g) {
          std::vector<double> s(ks.size()), o(hd, 0.0);
          double m = -1e300, z = 0, vmax = 0;
          for (size_t j = 0; j < ks.size(); ++j) {
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[g * hd + d]) * ks[j][d];
            s[j] = dot * scale;
            m = std::max(m, s[j]);
          }
          for (size_t j = 0; j < ks.size(); ++j) {
            const double p = std::exp(s[j] - m);
            z += p;
            for (int d = 0; d < hd; ++d) {
              o[d] += p * vs[j][d];
              vmax = std::max(vmax, std::fabs(static_cast<double>(vs[j][d])));
            }
          }
          ASSERT_NEAR(mx[g], m, 1e-5 * (1 + std::fabs(m)));
          for (int d = 0; d < hd; ++d) ASSERT_NEAR(acc[g * hd + d] / sm[g], o[d] / z, 2e-5 * vmax) << "d=" << d;
        }
      }
    }
  }
}

// The measurement behind choosing asymmetric int4 (docs/kv-tiers.md): RMS error relative
// to each row's max |x| of symmetric (levels -7..7, scale max|x|/7) and asymmetric
// (min + scale·0..15) int4 on centred, skewed and outlier rows. Asymmetric must not lose.
TEST(KvQuant, Int4AsymmetricBeatsSymmetric) {
  std::mt19937 rng(fresh_seed());
  const int hd = 128;
  const char* names[] = {"gaussian", "offset", "outlier"};
  for (int kind = 0; kind < 3; ++kind) {
    double se_sym = 0, se_asym = 0;
    for (int rep = 0; rep < 2000; ++rep) {
      const std::vector<float> x = random_row(rng, hd, kind);
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      const std::vector<float> y = decode(KvStoreDtype::kInt4, encode(KvStoreDtype::kInt4, x), hd);
      const float d = amax / 7.0f;
      for (int i = 0; i < hd; ++i) {
        const float ys = d * std::clamp(std::nearbyint(x[i] / d), -7.0f, 7.0f);
        se_sym += std::pow((ys - x[i]) / amax, 2);
        se_asym += std::pow((y[i] - x[i]) / amax, 2);
      }
    }
    const double rms_sym = std::sqrt(se_sym / (2000.0 * hd)), rms_asym = std::sqrt(se_asym / (2000.0 * hd));
    std::printf("[ int4 ] %-8s rms err / max|x|: symmetric %.4f, asymmetric %.4f\n", names[kind], rms_sym, rms_asym);
    EXPECT_LE(rms_asym, rms_sym * 1.02) << names[kind];
  }
}

}  // namespace
}  // namespace hs

namespace hs {
namespace {

// ---- fp8 e4m3 ----------------------------------------------------------------------------

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The reference: the finite e4m3 value nearest to x (ties to the even byte), |x| beyond
// 448 saturating, NaN -> 0x7F; found by searching all 127 non-negative finite codes in double.
uint8_t fp8_reference(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_err = a;
  for (int b = 1; b <= 0x7e; ++b) {
    const double v = fp8_e4m3_to_float(static_cast<uint8_t>(b));
    const double err = std::fabs(v - a);
    if (err < best_err || (err == best_err && (b & 1) == 0)) {
      best = b;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(KvQuantFp8, KnownEncodings) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    float x;
    uint8_t b;
  } cases[] = {
      {0.0f, 0x00},       {-0.0f, 0x80},          {1.0f, 0x38},           {-1.0f, 0xb8},
      {0.5f, 0x30},       {2.0f, 0x40},           {448.0f, 0x7e},         {-448.0f, 0xfe},
      {240.0f, 0x77},     {416.0f, 0x7d},         {0x1p-6f, 0x08},        {0x1p-9f, 0x01},   // 0.0019531: min subnormal
      {-0x1p-9f, 0x81},   {7 * 0x1p-9f, 0x07},    {0.0019531f, 0x01},
      // saturation (no inf in e4m3), NaN
      {449.0f, 0x7e},     {464.0f, 0x7e},         {465.0f, 0x7e},         {1e30f, 0x7e},
      {inf, 0x7e},        {-inf, 0xfe},           {nan, 0x7f},            {-nan, 0x7f},
      // ties go to the even code
      {1.0625f, 0x38},    {1.1875f, 0x3a},        {432.0f, 0x7e},         {0x1p-10f, 0x00},
      {-0x1p-10f, 0x80},  {3 * 0x1p-10f, 0x02},   {15 * 0x1p-10f, 0x08},  {0.3125f, 0x2a},
      // just off a tie
      {std::nextafter(1.0625f, 2.0f), 0x39},      {std::nextafter(0x1p-10f, 1.0f), 0x01},
      {std::nextafter(1.1875f, 0.0f), 0x39},      {0x1p-30f, 0x00},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(fp8_e4m3_from_float(c.x), c.b) << "x=" << c.x << " bits " << std::hex << bits_of(c.x);
    EXPECT_EQ(fp8_reference(c.x), c.b) << "reference, x=" << c.x;
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x77), 240.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xff)));
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
  // Every finite code round-trips; codes are ordered; midpoints of neighbours go to the even one.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    EXPECT_EQ(fp8_e4m3_from_float(fp8_e4m3_to_float(static_cast<uint8_t>(b))), b);
  }
  for (int b = 0; b < 0x7e; ++b) {
    const float lo = fp8_e4m3_to_float(static_cast<uint8_t>(b)), hi = fp8_e4m3_to_float(static_cast<uint8_t>(b + 1));
    ASSERT_LT(lo, hi);
    const float mid = 0.5f * (lo + hi);  // exact: both have <= 4 significant bits
    const int even = (b & 1) == 0 ? b : b + 1;
    for (float sgn : {1.0f, -1.0f}) {
      const uint8_t s = sgn < 0 ? 0x80 : 0x00;
      EXPECT_EQ(fp8_e4m3_from_float(sgn * mid), s | even) << "mid " << mid;
      EXPECT_EQ(fp8_e4m3_from_float(sgn * std::nextafter(mid, 0.0f)), s | b) << "below mid " << mid;
      EXPECT_EQ(fp8_e4m3_from_float(sgn * std::nextafter(mid, 1e30f)), s | (b + 1)) << "above mid " << mid;
    }
  }
}

// The encoder against the brute-force reference on random floats of every magnitude that
// matters (2^-14 .. 2^10, both signs) and on random bit patterns.
TEST(KvQuantFp8, EncoderMatchesNearestEvenReference) {
  std::mt19937 rng(fresh_seed());
  std::uniform_real_distribution<float> expo(-14.0f, 10.0f), mant(1.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) {
    float x;
    if (i % 4 == 3) {
      const uint32_t u = static_cast<uint32_t>(rng());
      std::memcpy(&x, &u, 4);
    } else {
      x = std::ldexp(mant(rng), static_cast<int>(std::floor(expo(rng)))) * (rng() % 2 ? 1.0f : -1.0f);
    }
    ASSERT_EQ(fp8_e4m3_from_float(x), fp8_reference(x)) << "x=" << x << " bits " << std::hex << bits_of(x);
  }
}

// kv_decode_row's SIMD path (the f16 bit trick) equals d · table bit for bit, for every
// byte value including NaN codes and subnormals, and an all-zero row encodes to zeros.
TEST(KvQuantFp8, RowDecodeEqualsScalarDecode) {
  std::vector<uint8_t> row(256);
  for (int b = 0; b < 256; ++b) row[b] = static_cast<uint8_t>(b);
  for (float d : {1.0f, 0.0078125f, 3.0e-6f, 1234.5f}) {
    const uint16_t dh = [&] {  // the f16 scale the encoder stores for a row whose max is 448 d
      std::vector<float> x(16, 0.0f);
      x[0] = d * 448.0f;
      std::vector<uint8_t> r(16);
      uint16_t h = 0;
      kv_encode_row(KvStoreDtype::kFp8, x.data(), 16, r.data(), &h);
      return h;
    }();
    _Float16 hf;
    std::memcpy(&hf, &dh, 2);
    const float df = static_cast<float>(hf);
    std::vector<float> y(256);
    kv_decode_row(KvStoreDtype::kFp8, row.data(), &dh, 256, y.data());
    for (int b = 0; b < 256; ++b) {
      const float want = df * fp8_e4m3_to_float(static_cast<uint8_t>(b));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[b])) << b;
      } else {
        EXPECT_EQ(bits_of(y[b]), bits_of(want)) << "byte " << b << " d " << df;
      }
    }
  }
  std::vector<float> zeros(64, 0.0f);
  zeros[5] = -0.0f;
  std::vector<uint8_t> r(64, 0xaa);
  uint16_t h = 0xffff;
  kv_encode_row(KvStoreDtype::kFp8, zeros.data(), 64, r.data(), &h);
  EXPECT_EQ(h, 0);
  for (uint8_t b : r) EXPECT_EQ(b, 0);
  // A row whose max is 448: d = 1 exactly, the bytes are the elements' own encodings.
  std::vector<float> x = {448.0f, -1.0f, 0.3125f, 0x1p-10f, 3 * 0x1p-10f, -240.0f, 1.0625f, 1e-3f};
  std::vector<uint8_t> e(8);
  kv_encode_row(KvStoreDtype::kFp8, x.data(), 8, e.data(), &h);
  EXPECT_EQ(h, 0x3c00);
  const uint8_t want[] = {0x7e, 0xb8, 0x2a, 0x00, 0x02, 0xf7, 0x38, 0x01};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(e[i], want[i]) << i;
}

// The measurement behind the bound in kv_quant.h and docs/kv-tiers.md: per-element error
// relative to |x| (normal range) and RMS error / max|x| of fp8 next to int8 (same bytes).
TEST(KvQuantFp8, ErrorAgainstInt8) {
  std::mt19937 rng(fresh_seed());
  const int hd = 128;
  const char* names[] = {"gaussian", "offset", "outlier"};
  for (int kind = 0; kind < 3; ++kind) {
    double se8 = 0, se_f8 = 0, max_rel = 0, max_step = 0;
    for (int rep = 0; rep < 2000; ++rep) {
      const std::vector<float> x = random_row(rng, hd, kind);
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      const Encoded e = encode(KvStoreDtype::kFp8, x);
      const std::vector<float> yf = decode(KvStoreDtype::kFp8, e, hd);
      const std::vector<float> y8 = decode(KvStoreDtype::kInt8, encode(KvStoreDtype::kInt8, x), hd);
      _Float16 dh;
      std::memcpy(&dh, e.scale.data(), 2);
      const double d = static_cast<float>(dh);
      for (int i = 0; i < hd; ++i) {
        se8 += std::pow((y8[i] - x[i]) / amax, 2);
        se_f8 += std::pow((yf[i] - x[i]) / amax, 2);
        const double err = std::fabs(static_cast<double>(yf[i]) - x[i]);
        if (std::fabs(x[i]) >= 0x1p-6 * d) max_rel = std::max(max_rel, err / std::fabs(x[i]));
        else max_step = std::max(max_step, err / d);
      }
    }
    const double n = 2000.0 * hd;
    std::printf("[ fp8  ] %-8s rms err / max|x|: int8 %.5f, fp8 %.5f; fp8 max err / |x| (normal) %.5f "
                "(bound 1/17 = %.5f), subnormal max err / d %.5f (bound 2^-10 = %.5f)\n",
                names[kind], std::sqrt(se8 / n), std::sqrt(se_f8 / n), max_rel, 1.0 / 17, max_step, 0x1p-10);
    EXPECT_LE(max_rel, 1.0 / 17 * (1 + 1e-5)) << names[kind];
    EXPECT_LE(max_step, 0x1p-10 * (1 + 1e-5)) << names[kind];
  }
}

}  // namespace
}  // namespace hs
