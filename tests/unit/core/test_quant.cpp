// tests/unit/core/test_quant.cpp — core/fp16.h and core/quant.h: conversions, hand-built
// blocks with known outputs, a committed gguf-python fixture (bitwise equality), errors,
// and QuantRandom.FromEnv, the dequantize CLI driven by tests/py/test_dequant_random.py.
//
// Tolerance: none. Every supported type's reference in gguf-python performs the same
// float32 operations in the same order as ggml (and as core/quant.cpp), each correctly
// rounded, so outputs must match bit for bit (NaN payloads included for F16/BF16/F32).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "core/quant.h"

namespace hs {
namespace {

// ---------------------------------------------------------------- independent references

// Value of half bits computed with ldexp (no bit tricks); NaN for NaN patterns.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? std::nan("") : s * INFINITY;
  if (e == 0) return s * std::ldexp(m, -24);
  return s * std::ldexp(1024 + m, e - 25);
}

// Round-to-nearest-even fp32 -> fp16 by searching the half grid, comparing distances in
// double (exact for every finite float against neighbouring halves in range).
uint16_t ref_fp32_to_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  // Largest positive half bits lo in [0, 0x7bff] with value <= a.
  uint32_t lo = 0, hi_bound = 0x7bff;
  if (a >= half_value(0x7bff)) {
    lo = 0x7bff;
  } else {
    while (lo < hi_bound) {
      const uint32_t mid = (lo + hi_bound + 1) / 2;
      if (half_value(static_cast<uint16_t>(mid)) <= a) lo = mid; else hi_bound = mid - 1;
    }
  }
  const double v_lo = half_value(static_cast<uint16_t>(lo));
  const double v_hi = lo == 0x7bff ? 65536.0 : half_value(static_cast<uint16_t>(lo + 1));
  const double d_lo = a - v_lo, d_hi = v_hi - a;
  uint32_t r = lo;
  if (d_hi < d_lo || (d_hi == d_lo && (lo & 1))) r = lo + 1;  // 0x7bff + 1 = inf
  return static_cast<uint16_t>(sign | r);
}

uint16_t ref_fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t lo = x & 0xffff0000u;
  const uint32_t hi = lo + 0x10000u;
  const double a = static_cast<double>(f);
  const double v_lo = std::bit_cast<float>(lo);
  const double v_hi = (hi & 0x7fffffffu) == 0x7f800000u
                          ? std::copysign(std::ldexp(1.0, 128), a)
                          : static_cast<double>(std::bit_cast<float>(hi));
  const double d_lo = std::fabs(a - v_lo), d_hi = std::fabs(v_hi - a);
  const bool up = d_hi < d_lo || (d_hi == d_lo && ((lo >> 16) & 1));
  return static_cast<uint16_t>((up ? hi : lo) >> 16);
}

// ------------------------------------------------------------------------ fp16 / bf16

TEST(Fp16, AllHalvesWidenExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const double ref = half_value(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      // Sign and the 10-bit payload survive, signaling NaNs stay signaling (as numpy).
      const uint32_t fb = std::bit_cast<uint32_t>(f);
      EXPECT_EQ(fb >> 31, h >> 15) << std::hex << h;
      EXPECT_EQ((fb >> 13) & 0x3ff, h & 0x3ff) << std::hex << h;
      EXPECT_EQ(fb & 0x1fff, 0u) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), ref) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;  // -0.0 too
    }
  }
}

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t back = fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h)));
    if (std::isnan(half_value(static_cast<uint16_t>(h)))) {
      EXPECT_TRUE(std::isnan(half_value(back))) << std::hex << h;
      EXPECT_TRUE(back & 0x0200) << "quiet bit, " << std::hex << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000);
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(Fp16, KnownRoundings) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // tie -> even -> inf
  EXPECT_EQ(fp32_to_fp16(-1e10f), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even -> 0
  EXPECT_EQ(fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp tie -> even 2
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.5f, -24)), 0x0400);  // carries into normal
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -140)), 0x0000);  // float subnormal
  const uint16_t qnan = fp32_to_fp16(std::bit_cast<float>(0x7f800001u));  // sNaN in
  EXPECT_EQ(qnan & 0x7e00, 0x7e00);
}

TEST(Fp16, Fp32ToFp16MatchesReferenceRounding) {
  // Exactly at, and one float either side of, every midpoint between adjacent halves.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double mid = (half_value(static_cast<uint16_t>(h)) +
                        half_value(static_cast<uint16_t>(h + 1))) / 2;
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid);  // 12 significant bits: exact in float
    for (float f : {m, std::nextafter(m, 0.0f), std::nextafter(m, INFINITY), -m}) {
      ASSERT_EQ(fp32_to_fp16(f), ref_fp32_to_fp16(f)) << f << " near half " << std::hex << h;
    }
  }
  // A stride walk over all finite float bit patterns, both signs.
  for (uint64_t b = 0; b < 0x7f800000u; b += 977) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(b));
    ASSERT_EQ(fp32_to_fp16(f), ref_fp32_to_fp16(f)) << std::hex << b;
    ASSERT_EQ(fp32_to_fp16(-f), ref_fp32_to_fp16(-f)) << std::hex << b;
  }
}

TEST(Fp16, Bf16ConversionsRoundToNearestEven) {
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xc040), -3.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(bf16_to_fp32(0x7f81)), 0x7f810000u);  // payload kept
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // -> inf
  EXPECT_EQ(fp32_to_bf16(-INFINITY), 0xff80);
  const uint16_t qnan = fp32_to_bf16(std::bit_cast<float>(0xff800001u));
  EXPECT_EQ(qnan & 0xffc0, 0xffc0);  // still NaN, quiet, sign kept
  for (uint64_t b = 0; b < 0x7f800000u; b += 991) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(b));
    ASSERT_EQ(fp32_to_bf16(f), ref_fp32_to_bf16(f)) << std::hex << b;
    ASSERT_EQ(fp32_to_bf16(-f), ref_fp32_to_bf16(-f)) << std::hex << b;
    ASSERT_EQ(std::bit_cast<uint32_t>(bf16_to_fp32(static_cast<uint16_t>(b >> 16))),
              static_cast<uint32_t>(b >> 16) << 16);
  }
}

// ------------------------------------------------------------------- hand-built blocks

constexpr uint16_t kHalfQuarter = 0x3400, kHalfHalf = 0x3800, kHalfOne = 0x3c00,
                   kHalfMinusOne = 0xbc00, kHalfEighth = 0x3000;

template <typename Block>
std::vector<float> run(DType type, const Block& b, int n) {
  std::vector<float> y(n, -12345.0f);  // [n]
  const Status st = dequantize_row(type, &b, sizeof(b), y.data(), n);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return y;
}

TEST(QuantHand, Q4_0) {
  BlockQ4_0 b{};
  b.d = kHalfHalf;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = run(DType::Q4_0, b, 32);
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[15], 3.5f);
  EXPECT_EQ(y[16], 3.5f);
  EXPECT_EQ(y[31], -4.0f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[16 + j], (7 - j) * 0.5f);
  }
}

TEST(QuantHand, Q4_1) {
  BlockQ4_1 b{};
  b.d = kHalfQuarter;
  b.m = kHalfMinusOne;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = run(DType::Q4_1, b, 32);
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[15], 2.75f);
  EXPECT_EQ(y[16], 2.75f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.25f - 1.0f);
    EXPECT_EQ(y[16 + j], (15 - j) * 0.25f - 1.0f);
  }
}

TEST(QuantHand, Q5_0) {
  BlockQ5_0 b{};
  b.d = kHalfHalf;
  const uint8_t qh[4] = {0x01, 0x00, 0x00, 0x80};  // 5th bit set for elements 0 and 31
  std::memcpy(b.qh, qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (j << 4));
  const auto y = run(DType::Q5_0, b, 32);
  EXPECT_EQ(y[0], 0.0f);    // (0 | 16) - 16
  EXPECT_EQ(y[1], -7.5f);   // 1 - 16
  EXPECT_EQ(y[15], -0.5f);  // 15 - 16
  EXPECT_EQ(y[16], -8.0f);  // 0 - 16
  EXPECT_EQ(y[31], 7.5f);   // (15 | 16) - 16
}

TEST(QuantHand, Q5_1) {
  BlockQ5_1 b{};
  b.d = kHalfOne;
  b.m = kHalfHalf;
  const uint8_t qh[4] = {0x00, 0x00, 0xff, 0xff};  // 5th bit for elements 16..31
  std::memcpy(b.qh, qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (j << 4));
  const auto y = run(DType::Q5_1, b, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], i + 0.5f) << i;
}

TEST(QuantHand, Q8_0) {
  BlockQ8_0 b{};
  b.d = kHalfEighth;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  b.qs[0] = -128;
  b.qs[31] = 127;
  const auto y = run(DType::Q8_0, b, 32);
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[1], -1.875f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[31], 15.875f);
}

// Test-side encoder of the 12-byte Q4_K/Q5_K (scale, min) packing.
void pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

constexpr uint8_t kSc[8] = {1, 2, 3, 4, 33, 47, 62, 63};
constexpr uint8_t kMin[8] = {0, 5, 10, 63, 17, 48, 1, 36};

TEST(QuantHand, ScaleMinK4Unpacks) {
  uint8_t packed[12];
  pack_scale_min(kSc, kMin, packed);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc = 0, m = 0;
    get_scale_min_k4(j, packed, &sc, &m);
    EXPECT_EQ(sc, kSc[j]) << j;
    EXPECT_EQ(m, kMin[j]) << j;
  }
}

TEST(QuantHand, Q4_K) {
  BlockQ4K b{};
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  pack_scale_min(kSc, kMin, b.scales);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>((l & 15) | (((l + c) & 15) << 4));
  const auto y = run(DType::Q4_K, b, 256);
  // Element n: sub-block s = n / 32, chunk c = s / 2; even s -> low nibble, odd -> high.
  for (int n = 0; n < 256; ++n) {
    const int s = n / 32, c = s / 2, l = n % 32;
    const int q = (s % 2 == 0) ? (l & 15) : ((l + c) & 15);
    EXPECT_EQ(y[n], kSc[s] * q - 0.5f * kMin[s]) << n;
  }
  EXPECT_EQ(y[1], 1.0f);           // sc 1, q 1, min 0
  EXPECT_EQ(y[32 + 3], 2 * 3 - 2.5f);
  EXPECT_EQ(y[255], 63.0f * 2 - 18.0f);  // s 7, c 3, l 31: q = (31+3)&15 = 2
}

TEST(QuantHand, Q5_K) {
  BlockQ5K b{};
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  pack_scale_min(kSc, kMin, b.scales);
  for (int l = 0; l < 32; ++l) b.qh[l] = static_cast<uint8_t>(l * 37 + 11);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = static_cast<uint8_t>((l & 15) | (((l + c) & 15) << 4));
  const auto y = run(DType::Q5_K, b, 256);
  for (int n = 0; n < 256; ++n) {
    const int s = n / 32, c = s / 2, l = n % 32;
    const int nib = (s % 2 == 0) ? (l & 15) : ((l + c) & 15);
    const int q = nib | (((b.qh[l] >> s) & 1) << 4);
    EXPECT_EQ(y[n], kSc[s] * q - 0.5f * kMin[s]) << n;
  }
  EXPECT_EQ(y[0], 16.0f);  // qh[0] = 11 = 0b1011: bit 0 set -> q = 16, sc 1, min 0
}

TEST(QuantHand, Q6_K) {
  BlockQ6K b{};
  b.d = kHalfHalf;
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>(i - 8);
  for (int k = 0; k < 128; ++k) b.ql[k] = static_cast<uint8_t>(k * 7);
  for (int k = 0; k < 64; ++k) b.qh[k] = static_cast<uint8_t>(k * 13);
  const auto y = run(DType::Q6_K, b, 256);
  // Gather form: element n in half h, group g (of 32), lane l.
  for (int n = 0; n < 256; ++n) {
    const int h = n / 128, g = (n % 128) / 32, l = n % 32;
    const uint8_t lb = b.ql[64 * h + l + 32 * (g & 1)];
    const int nib = g < 2 ? (lb & 15) : (lb >> 4);
    const int hi = (b.qh[32 * h + l] >> (2 * g)) & 3;
    const int q = (nib | (hi << 4)) - 32;
    EXPECT_EQ(y[n], 0.5f * b.scales[n / 16] * q) << n;
  }
  // n = 0: ql 0, qh 0 -> q = -32, scale -8: 0.5 * -8 * -32 = 128.
  EXPECT_EQ(y[0], 128.0f);
}

TEST(QuantHand, ScalarTypes) {
  const float f32[3] = {1.5f, -0.0f, 3e-39f};
  std::vector<float> y(3);
  ASSERT_TRUE(dequantize_row(DType::F32, f32, sizeof(f32), y.data(), 3).is_ok());
  EXPECT_EQ(std::memcmp(y.data(), f32, sizeof(f32)), 0);
  const uint16_t f16[3] = {0x3c00, 0x0001, 0xfc00};
  ASSERT_TRUE(dequantize_row(DType::F16, f16, sizeof(f16), y.data(), 3).is_ok());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(y[2], -INFINITY);
  const uint16_t bf16[3] = {0x3f80, 0x0001, 0xc2f7};
  ASSERT_TRUE(dequantize_row(DType::BF16, bf16, sizeof(bf16), y.data(), 3).is_ok());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], std::bit_cast<float>(0x00010000u));
  EXPECT_EQ(y[2], -123.5f);
}

// ------------------------------------------------------------- record files (fixture)

struct Record {
  uint32_t type = 0;
  uint64_t n_elems = 0;
  std::vector<uint8_t> data;      // [n_bytes]
  std::vector<float> expected;    // [n_elems] (fixture only)
};

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

template <typename T>
bool take(const std::vector<uint8_t>& buf, size_t& pos, T* v) {
  if (buf.size() - pos < sizeof(T)) return false;
  std::memcpy(v, buf.data() + pos, sizeof(T));
  pos += sizeof(T);
  return true;
}

// Parses `count` records (or until the end when count < 0) starting at pos.
bool parse_records(const std::vector<uint8_t>& buf, size_t pos, int64_t count,
                   bool with_expected, std::vector<Record>* out) {
  for (int64_t i = 0; count < 0 ? pos < buf.size() : i < count; ++i) {
    Record r;
    uint64_t n_bytes = 0;
    if (!take(buf, pos, &r.type) || !take(buf, pos, &r.n_elems) || !take(buf, pos, &n_bytes))
      return false;
    if (buf.size() - pos < n_bytes) return false;
    r.data.assign(buf.begin() + pos, buf.begin() + pos + n_bytes);
    pos += n_bytes;
    if (with_expected) {
      if ((buf.size() - pos) / 4 < r.n_elems) return false;
      r.expected.resize(r.n_elems);
      std::memcpy(r.expected.data(), buf.data() + pos, r.n_elems * 4);
      pos += r.n_elems * 4;
    }
    out->push_back(std::move(r));
  }
  return pos == buf.size();
}

std::vector<Record> load_fixture() {
  const auto buf = read_file(std::string(HS_FIXTURES_DIR) + "/quant/dequant_cases.bin");
  std::vector<Record> recs;
  uint32_t version = 0, n = 0;
  size_t pos = 4;
  if (buf.size() < 12 || std::memcmp(buf.data(), "HSDQ", 4) != 0 ||
      !take(buf, pos, &version) || !take(buf, pos, &n) || version != 1 ||
      !parse_records(buf, pos, n, true, &recs)) {
    ADD_FAILURE() << "bad or missing fixture; regenerate with tools/reference/gen_quant_fixtures.py";
    return {};
  }
  return recs;
}

// Bitwise comparison; reports the first few differing elements.
void expect_bits_equal(const std::vector<float>& got, const std::vector<float>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int shown = 0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const uint32_t g = std::bit_cast<uint32_t>(got[i]), w = std::bit_cast<uint32_t>(want[i]);
    if (g == w) continue;
    ++bad;
    if (shown++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << " (0x" << std::hex << g
                    << ") want " << want[i] << " (0x" << w << ")" << std::dec;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " differ";
}

TEST(QuantFixture, MatchesGgufPythonBitwise) {
  const auto recs = load_fixture();
  ASSERT_FALSE(recs.empty());
  std::set<uint32_t> seen;
  for (const auto& r : recs) {
    const auto type = static_cast<DType>(r.type);
    const std::string what = std::string(dtype_name(type)) + " x" + std::to_string(r.n_elems);
    std::vector<float> y(r.n_elems);  // [n_elems]
    const Status st = dequantize_row(type, r.data.data(), r.data.size(), y.data(),
                                     static_cast<int64_t>(r.n_elems));
    ASSERT_TRUE(st.is_ok()) << what << ": " << st.to_string();
    expect_bits_equal(y, r.expected, what);
    seen.insert(r.type);
  }
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                  DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    EXPECT_TRUE(seen.count(static_cast<uint32_t>(t))) << "fixture lacks " << dtype_name(t);
}

TEST(QuantFixture, UnalignedSourceGivesSameResult) {
  for (const auto& r : load_fixture()) {
    const auto type = static_cast<DType>(r.type);
    std::vector<uint8_t> shifted(r.data.size() + 1);  // [1 pad + n_bytes]
    std::memcpy(shifted.data() + 1, r.data.data(), r.data.size());
    std::vector<float> y(r.n_elems);
    ASSERT_TRUE(dequantize_row(type, shifted.data() + 1, r.data.size(), y.data(),
                               static_cast<int64_t>(r.n_elems)).is_ok());
    expect_bits_equal(y, r.expected, std::string("unaligned ") + std::string(dtype_name(type)));
  }
}

// ------------------------------------------------------------------------------ errors

TEST(QuantErrors, RejectsBadSizesAndTypes) {
  std::vector<uint8_t> src(1024, 0);
  std::vector<float> y(1024);
  Status st = dequantize_row(DType::Q4_0, src.data(), src.size(), y.data(), 33);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("Q4_0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("32"), std::string::npos) << st.message();

  st = dequantize_row(DType::Q6_K, src.data(), src.size(), y.data(), 128);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);

  st = dequantize_row(DType::Q8_0, src.data(), 34 * 2 - 1, y.data(), 64);  // 1 byte short
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_TRUE(dequantize_row(DType::Q8_0, src.data(), 34 * 2, y.data(), 64).is_ok());
  EXPECT_TRUE(dequantize_row(DType::Q8_0, src.data(), 34 * 2 + 5, y.data(), 64).is_ok());

  st = dequantize_row(DType::F32, src.data(), 11, y.data(), 3);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);

  st = dequantize_row(DType::Q4_K, src.data(), src.size(), y.data(), -256);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);

  st = dequantize_row(DType::Q2_K, src.data(), src.size(), y.data(), 256);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("Q2_K"), std::string::npos) << st.message();

  st = dequantize_row(static_cast<DType>(99), src.data(), src.size(), y.data(), 32);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("99"), std::string::npos) << st.message();

  // Zero elements: fine, even from a null source into a null destination.
  EXPECT_TRUE(dequantize_row(DType::Q5_K, nullptr, 0, nullptr, 0).is_ok());
  // A huge element count must fail on size, not overflow.
  st = dequantize_row(DType::Q4_0, src.data(), src.size(), y.data(), INT64_MAX / 32 * 32);
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
}

// --------------------------------------------------------------- CLI for the pytest

// Dequantizes every record of $HS_DEQUANT_IN ([u32 type][u64 n_elems][u64 n_bytes][bytes],
// repeated) and writes the float32 outputs, concatenated, to $HS_DEQUANT_OUT. Skipped
// unless both are set; driven by tests/py/test_dequant_random.py.
TEST(QuantRandom, FromEnv) {
  const char* in_path = std::getenv("HS_DEQUANT_IN");
  const char* out_path = std::getenv("HS_DEQUANT_OUT");
  if (!in_path || !out_path) GTEST_SKIP() << "set HS_DEQUANT_IN and HS_DEQUANT_OUT";
  const auto buf = read_file(in_path);
  std::vector<Record> recs;
  ASSERT_TRUE(parse_records(buf, 0, -1, false, &recs)) << "malformed " << in_path;
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out.good()) << "cannot write " << out_path;
  for (const auto& r : recs) {
    std::vector<float> y(r.n_elems);  // [n_elems]
    const Status st = dequantize_row(static_cast<DType>(r.type), r.data.data(), r.data.size(),
                                     y.data(), static_cast<int64_t>(r.n_elems));
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    out.write(reinterpret_cast<const char*>(y.data()),
              static_cast<std::streamsize>(y.size() * sizeof(float)));
  }
  out.close();
  ASSERT_TRUE(out.good()) << "write failed: " << out_path;
}

}  // namespace
}  // namespace hs
