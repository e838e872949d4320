// tests/unit/backend/test_matmul_exact.cpp — the float-activation matmul and its SIMD
// dequantizers against the reference dequantizer (core/quant.h) and a float64 dot product,
// on fresh random weights and activations for every supported type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/matmul_exact.h"
#include "core/fp16.h"
#include "core/quant.h"

namespace hs {
namespace {

// Random bytes for n_out rows of n_in elements of `type`, with finite, modest scales.
std::vector<uint8_t> random_weights(DType type, int64_t n_in, int64_t n_out, std::mt19937& rng) {
  const auto info = *dtype_info(type);
  const int64_t n_blocks = n_in / info.block_elems * n_out;
  std::vector<uint8_t> bytes(n_blocks * info.block_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto put_half = [&](uint8_t* p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t k = 0; k < n_blocks; ++k) {
    uint8_t* blk = bytes.data() + k * info.block_bytes;
    switch (type) {
      case DType::F32: { float v = nd(rng); std::memcpy(blk, &v, 4); break; }
      case DType::F16: put_half(blk, nd(rng)); break;
      case DType::BF16: { uint16_t h = fp32_to_bf16(nd(rng)); std::memcpy(blk, &h, 2); break; }
      case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K:
        put_half(blk, 0.01f * nd(rng));
        put_half(blk + 2, 0.01f * nd(rng));
        break;
      case DType::Q6_K: put_half(blk + 208, 0.01f * nd(rng)); break;
      default: put_half(blk, 0.01f * nd(rng)); break;  // Q4_0, Q5_0, Q8_0: d first
    }
  }
  return bytes;
}

class MatmulExact : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulExact, DequantAndProductsMatchReference) {
  const DType type = GetParam();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const auto info = *dtype_info(type);
  const int64_t n_in = info.block_elems == 256 ? 512 : 192;
  for (int64_t n_out : {1, 7, 33}) {
    auto wbytes = random_weights(type, n_in, n_out, rng);
    const int64_t row_bytes = dtype_row_bytes(info, n_in);
    // Dequantizers: SIMD kernel vs reference, row by row.
    std::vector<float> ref_w(n_in * n_out), got(n_in);
    for (int64_t o = 0; o < n_out; ++o) {
      ASSERT_TRUE(dequantize_row(type, wbytes.data() + o * row_bytes, row_bytes, ref_w.data() + o * n_in, n_in).is_ok());
      cpu::detail::dequant_blocks_for_test(type, wbytes.data() + o * row_bytes, n_in, got.data());
      for (int64_t i = 0; i < n_in; ++i)  // FMA contraction may change the last bit
        ASSERT_NEAR(got[i], ref_w[o * n_in + i], 1e-6f * (1 + std::fabs(ref_w[o * n_in + i])))
            << dtype_name(type) << " seed " << seed << " row " << o << " elem " << i;
    }
    for (int64_t n_tok : {1, 3, 70}) {
      std::normal_distribution<float> nd;
      std::vector<float> x(n_tok * n_in), y(n_tok * n_out);
      for (auto& v : x) v = nd(rng);
      ThreadPool pool(2);
      cpu::WeightView w{type, n_in, n_out, wbytes.data()};
      ASSERT_TRUE(cpu::matmul_exact(w, x.data(), n_tok, y.data(), pool).is_ok());
      for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t o = 0; o < n_out; ++o) {
          double ref = 0, mag = 0;
          for (int64_t i = 0; i < n_in; ++i) {
            ref += double(ref_w[o * n_in + i]) * x[t * n_in + i];
            mag += std::fabs(double(ref_w[o * n_in + i]) * x[t * n_in + i]);
          }
          // float32 accumulation: error bounded by ~n_in * eps * sum|terms|; 1e-5 is ample.
          ASSERT_NEAR(y[t * n_out + o], ref, 1e-5 * mag + 1e-30)
              << dtype_name(type) << " seed " << seed << " t " << t << " o " << o;
        }
    }
  }
}

TEST(MatmulExactErrors, RejectsUnsupportedAndBadShapes) {
  ThreadPool pool(1);
  std::vector<float> x(64), y(4);
  std::vector<uint8_t> wb(1024);
  auto s = cpu::matmul_exact(cpu::WeightView{DType::Q2_K, 256, 1, wb.data()}, x.data(), 1, y.data(), pool);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("Q2_K"), std::string::npos);
  s = cpu::matmul_exact(cpu::WeightView{DType::Q4_0, 33, 1, wb.data()}, x.data(), 1, y.data(), pool);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulExact,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                           DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace hs
