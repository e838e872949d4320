// tests/unit/kv/test_kv_quant.cpp — per-token-per-head KV row formats: round-trip error
// bounds, fused dot / axpy and the GQA piece kernels against decode-then-float references,
// piece and page layouts. Every test draws fresh random inputs (the seed is printed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kv/kv_quant.h"

namespace hs {
namespace {

constexpr KvStoreDtype kAll[] = {KvStoreDtype::kF32, KvStoreDtype::kF16, KvStoreDtype::kBF16, KvStoreDtype::kInt8,
                                 KvStoreDtype::kInt4};

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
  EXPECT_TRUE(parse_kv_store_dtype("auto").is_ok());
  EXPECT_EQ(*parse_kv_store_dtype("int4"), KvStoreDtype::kInt4);
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
