// tests/ops/test_quant_gemv.cpp — the quantized-weight device layout (backend/cuda/quant_layout.h)
// and the decode GEMV / dequantize / embedding launchers (backend/cuda/gemv_kernels.h), called
// directly with cudaMalloc'd buffers (no backend).
//
// QuantLayout.*: on the host (CUDA builds, no device needed): repacked rows dequantize to
// hs::dequantize_row's floats bit for bit; row sizes are multiples of 16 within 1.15x of GGUF.
// QuantGemv.*: on the GPU (skips without a device), against a double-precision reference from
// hs::dequantize_row of random GGUF blocks (random bytes, random f16 scales):
//   GEMV: |y - ref| <= 1e-5 * sum_c |W[r][c]| |x[t][c]| per output (the kernels split x into
//     exact-sum f16 / bf16 terms, ~2^-22 of |x| lost, and sum in fp32: ~1e-6 expected); shapes
//     with odd rows (1, 7, 37, 4099), padded groups (Q4_0 / Q8_0 cols 96, 160), cols up to 14336,
//     1 / 2 / 3 / 8 tokens with tokens scaled by 1e5 and 1e-5 (the per-token scaling), strided
//     and unaligned x / y (y's padding must stay NaN), every row-warp x cluster split.
//   dequantize: bitwise f16(clamp(dequantize_row)); embedding: bitwise dequantize_row.
// QuantGemm.* (the tensor-core GEMM of 9..128 tokens, backend/cuda/gemm_quant_mma.h): against a
//   double-precision sum over the weights as f16 (Q4_0 / Q8_0: the dequantized floats rounded to
//   f16, which is what the kernel multiplies) and x rounded to f16: |y - ref| <= 1e-5 sum |w||x|
//   (fp32 accumulation only); Q4_K (its f16 weight is one more rounding away, q f16(d sc) -
//   f16(dmin m)) against the exact weights: 4e-3. Odd rows, padded groups, 9..128 tokens, every
//   cluster split and token tiling; y's padding must stay NaN.
// QuantGemv.Bandwidth / QuantGemm.Bandwidth (HS_GEMV_BENCH=1 only): the launchers' weight-read
//   rate on 8B-llama / Qwen3.5-27B shapes.
// Inputs are fresh each run (HS_TEST_SEED=<n> replays; the seed is in every failure message).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "ops_test_util.h"

#if defined(HS_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "backend/cuda/gemm_quant_mma.h"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/quant_layout.h"
#include "cuda_test_util.h"
#endif

namespace hs {
namespace {

#if defined(HS_WITH_CUDA)

using cuda_test::DevBuf;
using cuda_test::have_device;
using cuda_test::kind_dtype;
using cuda_test::kind_name;

using cuda::QuantKind;
using ops_test::normal;
using ops_test::seed_note;
using ops_test::test_seed;

constexpr QuantKind kKinds[] = {QuantKind::kQ4_0, QuantKind::kQ8_0, QuantKind::kQ4_K};

// [rows] GGUF rows of cols / block elements each: random quants, random f16 scales (a few zero or
// negative, as real files have).
std::vector<uint8_t> random_gguf(QuantKind k, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const int64_t bc = cuda::quant_block_cols(k), bb = cuda::quant_gguf_block_bytes(k);
  const int64_t n_blocks = rows * (cols / bc);
  std::vector<uint8_t> out(static_cast<size_t>(n_blocks * bb));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& b : out) b = static_cast<uint8_t>(byte(rng));
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = out.data() + i * bb;
    auto put = [&](int off, float v) {
      const uint16_t h = fp32_to_fp16(v);
      std::memcpy(blk + off, &h, 2);
    };
    const float r = u(rng);  // > 0.97: a zero scale
    if (k == QuantKind::kQ4_K) {
      put(0, r > 0.97f ? 0.0f : 0.02f * std::fabs(u(rng)));  // d
      put(2, 0.02f * std::fabs(u(rng)));                     // dmin
    } else {
      put(0, r > 0.97f ? 0.0f : (k == QuantKind::kQ4_0 ? 0.05f : 0.01f) * u(rng));
    }
  }
  return out;
}

std::vector<float> dequant_ref(QuantKind k, const std::vector<uint8_t>& gguf, int64_t rows, int64_t cols) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  const Status st = dequantize_row(kind_dtype(k), gguf.data(), gguf.size(), w.data(), rows * cols);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return w;
}

std::vector<uint8_t> repack(QuantKind k, const std::vector<uint8_t>& gguf, int64_t rows, int64_t cols,
                            int64_t row_bytes) {
  const int64_t src_row = cols / cuda::quant_block_cols(k) * cuda::quant_gguf_block_bytes(k);
  std::vector<uint8_t> dev(static_cast<size_t>(rows * row_bytes), 0xAB);
  for (int64_t r = 0; r < rows; ++r) cuda::quant_repack_row(k, gguf.data() + r * src_row, cols, dev.data() + r * row_bytes);
  return dev;
}

// ---- host: the layout ----------------------------------------------------------------------

TEST(QuantLayout, RepackMatchesDequantizeRow) {
  std::mt19937_64 rng(test_seed());
  for (QuantKind k : kKinds) {
    for (int64_t cols : {32, 64, 96, 160, 256, 512, 576, 896, 4096, 4864, 14336}) {
      if (!cuda::quant_cols_valid(k, cols)) continue;
      const int64_t rows = 3;
      const int64_t rb = cuda::quant_device_row_bytes(k, cols);
      EXPECT_EQ(rb % 16, 0) << kind_name(k) << " cols " << cols;
      const double gguf_bytes = static_cast<double>(cols / cuda::quant_block_cols(k) * cuda::quant_gguf_block_bytes(k));
      if (cols >= 256) {
        EXPECT_LE(rb, 1.15 * gguf_bytes) << kind_name(k) << " cols " << cols;
      }
      const auto gguf = random_gguf(k, rows, cols, rng);
      const auto want = dequant_ref(k, gguf, rows, cols);
      const auto dev = repack(k, gguf, rows, cols, rb);
      std::vector<float> got(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        cuda::quant_dequantize_device_row(k, dev.data() + r * rb, cols, got.data());
        int64_t bad = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const float w = want[static_cast<size_t>(r * cols + c)];
          if (std::memcmp(&w, &got[static_cast<size_t>(c)], 4) != 0 && bad++ < 3)
            ADD_FAILURE() << kind_name(k) << " cols " << cols << " row " << r << " col " << c << ": " << got[c]
                          << " vs " << w << "; " << seed_note();
        }
        // Padding past the last block is zero (zero quants, zero scales).
        const cuda::QuantRowLayout l = cuda::quant_row_layout(k, cols);
        const uint8_t* row = dev.data() + r * rb;
        for (int64_t b = cols / 32; b < l.blocks; ++b) {
          const int64_t g = b / (l.group_cols / 32);
          for (int t = 0; t < 4; ++t) {
            const int64_t off = k == QuantKind::kQ8_0 ? 64 * g + 16 * t + 8 * (b % 2) : 64 * g + 16 * t + 4 * (b % 4);
            for (int i = 0; i < (k == QuantKind::kQ8_0 ? 8 : 4); ++i) EXPECT_EQ(row[off + i], 0) << "pad quant";
          }
          EXPECT_EQ(row[l.scale_offset + 2 * b], 0) << "pad scale";
          EXPECT_EQ(row[l.scale_offset + 2 * b + 1], 0) << "pad scale";
        }
      }
    }
  }
}

TEST(QuantLayout, Sizes) {
  // 8B-llama shapes: the device row is the GGUF row (Q4_0, Q8_0) or 1.028x (Q4_K).
  EXPECT_EQ(cuda::quant_device_row_bytes(QuantKind::kQ4_0, 4096), 4096 / 32 * 18);
  EXPECT_EQ(cuda::quant_device_row_bytes(QuantKind::kQ8_0, 4096), 4096 / 32 * 34);
  EXPECT_EQ(cuda::quant_device_row_bytes(QuantKind::kQ4_K, 4096), 16 * 148);
  EXPECT_EQ(cuda::quant_device_row_bytes(QuantKind::kQ4_K, 14336), 56 * 148);
  EXPECT_EQ(cuda::quant_device_row_bytes(QuantKind::kQ4_0, 96), 80);                // one padded group: 72 -> 80
}

// ---- device helpers ------------------------------------------------------------------------

#define HS_CU(expr)                                                                   \
  do {                                                                                \
    const cudaError_t hs_e_ = (expr);                                                 \
    ASSERT_EQ(hs_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(hs_e_) << "; " << seed_note(); \
  } while (0)

class QuantGemv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^ std::hash<std::string>{}(info->name()));
  }
  std::mt19937_64 rng_;
};

// x: [ntok][cols] with token 1 scaled by 1e5 and token 2 by 1e-5 (when present), 1 % outliers.
std::vector<float> make_x(std::mt19937_64& rng, int ntok, int64_t cols) {
  std::vector<float> x = normal(rng, static_cast<size_t>(ntok * cols), 1.0f, true);
  for (int t = 1; t < std::min(ntok, 3); ++t)
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(t * cols + c)] *= t == 1 ? 1e5f : 1e-5f;
  return x;
}

struct GemvCheck {
  double worst = 0;  // max |y - ref| / sum |w||x|
  int64_t bad = 0;
};

// y [ntok][ys] (rows outputs a token, NaN padding) against the double sum over w16 [rows][cols]
// and xr [ntok][cols] (x as the kernel reads it), within tol * sum |w||x| per output; the
// padding must stay NaN.
GemvCheck compare_y(const std::vector<float>& w16, int64_t rows, int64_t cols, const std::vector<float>& xr, int ntok,
                    const std::vector<float>& y, int64_t ys, double tol, const std::string& what) {
  GemvCheck res;
  for (int64_t r = 0; r < rows; ++r) {
    for (int t = 0; t < ntok; ++t) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(w16[static_cast<size_t>(r * cols + c)]) * xr[static_cast<size_t>(t * cols + c)];
        ref += p;
        mag += std::fabs(p);
      }
      const double got = y[static_cast<size_t>(t * ys + r)];
      const double err = std::fabs(got - ref) / std::max(mag, 1e-300);
      if (!(err <= tol) && res.bad++ < 3)
        ADD_FAILURE() << what << ": y[" << t << "][" << r << "] = " << got << ", ref " << ref << " (sum |wx| " << mag
                      << ", rel " << err << "); " << seed_note();
      if (std::isfinite(err)) res.worst = std::max(res.worst, err);
    }
  }
  for (int t = 0; t < ntok; ++t)
    for (int64_t r = rows; r < ys; ++r)
      if (!std::isnan(y[static_cast<size_t>(t * ys + r)]) && res.bad++ < 3)
        ADD_FAILURE() << what << ": wrote y padding [" << t << "][" << r << "]";
  return res;
}

// Runs `launch` (which writes y) for x [ntok][cols] and compares with the reference from w
// ([rows][cols] floats). x rows are x_stride floats apart (x_off floats into the buffer: 1 makes
// them unaligned), y rows y_stride apart; y's padding is NaN before and must stay NaN.
template <typename Launch>
GemvCheck check_gemv(const std::vector<float>& w, int64_t rows, int64_t cols, const std::vector<float>& x, int ntok,
                     int64_t x_stride, int64_t x_off, int64_t y_stride, Launch launch, const std::string& what) {
  GemvCheck res;
  std::vector<float> xh(static_cast<size_t>(x_off + ntok * x_stride), 0.0f);
  for (int t = 0; t < ntok; ++t)
    std::copy_n(x.begin() + t * cols, cols, xh.begin() + x_off + t * x_stride);
  DevBuf dx(xh.size() * 4), dy(static_cast<size_t>(ntok * y_stride) * 4);
  EXPECT_TRUE(dx.p && dy.p);
  if (!dx.p || !dy.p) return res;
  EXPECT_EQ(cudaMemcpy(dx.p, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dy.p, 0xFF, static_cast<size_t>(ntok * y_stride) * 4), cudaSuccess);  // NaN
  const cuda::CRows xr{dx.as<float>() + x_off, ntok, cols, x_stride};
  const cuda::Rows yr{dy.as<float>(), ntok, rows, y_stride};
  const cudaError_t e = launch(xr, yr);
  EXPECT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
  const cudaError_t es = cudaDeviceSynchronize();
  EXPECT_EQ(es, cudaSuccess) << what << ": " << cudaGetErrorString(es);
  if (e != cudaSuccess || es != cudaSuccess) {
    res.bad = 1;
    return res;
  }
  std::vector<float> y(static_cast<size_t>(ntok * y_stride));
  EXPECT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return compare_y(w, rows, cols, x, ntok, y, y_stride, 1e-5, what);
}

struct QuantWeights {
  std::vector<float> w;  // [rows][cols] reference floats
  DevBuf dev;            // [rows][row_bytes] repacked
  int64_t row_bytes = 0;
  QuantWeights(QuantKind k, int64_t rows, int64_t cols, std::mt19937_64& rng)
      : dev(static_cast<size_t>(rows * cuda::quant_device_row_bytes(k, cols))) {
    row_bytes = cuda::quant_device_row_bytes(k, cols);
    const auto gguf = random_gguf(k, rows, cols, rng);
    w = dequant_ref(k, gguf, rows, cols);
    const auto bytes = repack(k, gguf, rows, cols, row_bytes);
    if (dev.p) cudaMemcpy(dev.p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
  }
};

struct Shape {
  int64_t rows, cols;
};

// ---- device: GEMV ----------------------------------------------------------------------------

TEST_F(QuantGemv, QuantMatchesReference) {
  const std::vector<Shape> shapes = {{1, 256}, {7, 4096}, {37, 256}, {37, 14336}, {4099, 4096}, {300, 14336},
                                     {5, 96},  {33, 160}};
  for (QuantKind k : kKinds) {
    for (const Shape& sh : shapes) {
      if (!cuda::quant_cols_valid(k, sh.cols)) continue;
      QuantWeights qw(k, sh.rows, sh.cols, rng_);
      ASSERT_NE(qw.dev.p, nullptr);
      double worst = 0;
      for (int ntok : {1, 2, 3, 8}) {
        const auto x = make_x(rng_, ntok, sh.cols);
        const bool odd = (ntok & 1) != 0;  // odd token counts: unaligned, padded x and y
        const int64_t xs = sh.cols + (odd ? 5 : 0), xo = odd ? 1 : 0, ys = sh.rows + (odd ? 3 : 0);
        const std::string what = std::string(kind_name(k)) + " " + std::to_string(sh.rows) + "x" +
                                 std::to_string(sh.cols) + " ntok " + std::to_string(ntok);
        const GemvCheck r = check_gemv(
            qw.w, sh.rows, sh.cols, x, ntok, xs, xo, ys,
            [&](cuda::CRows xr, cuda::Rows yr) {
              return cuda::launch_gemv_quant(k, qw.dev.as<uint8_t>(), sh.rows, sh.cols, qw.row_bytes, xr, yr, nullptr);
            },
            what);
        worst = std::max(worst, r.worst);
      }
      std::printf("gemv %-5s %6lld x %-6lld worst rel err %.2e\n", kind_name(k), static_cast<long long>(sh.rows),
                  static_cast<long long>(sh.cols), worst);
    }
  }
}

TEST_F(QuantGemv, SixteenBitMatchesReference) {
  const std::vector<Shape> shapes = {{1, 256}, {7, 4096}, {37, 200}, {37, 14336}, {4099, 4096}, {300, 14336}};
  for (bool bf16 : {false, true}) {
    for (const Shape& sh : shapes) {
      const int64_t stride = sh.cols + (sh.rows % 2 ? 8 : 0);  // padded rows for odd row counts
      std::vector<uint16_t> bits(static_cast<size_t>(sh.rows * stride), 0xFFFF);  // NaN padding
      std::vector<float> w(static_cast<size_t>(sh.rows * sh.cols));
      const auto v = normal(rng_, w.size(), 0.05f, true);
      for (int64_t r = 0; r < sh.rows; ++r)
        for (int64_t c = 0; c < sh.cols; ++c) {
          const float f = v[static_cast<size_t>(r * sh.cols + c)];
          const uint16_t b = bf16 ? fp32_to_bf16(f) : fp32_to_fp16(f);
          bits[static_cast<size_t>(r * stride + c)] = b;
          w[static_cast<size_t>(r * sh.cols + c)] = bf16 ? bf16_to_fp32(b) : fp16_to_fp32(b);
        }
      DevBuf dw(bits.size() * 2);
      ASSERT_NE(dw.p, nullptr);
      HS_CU(cudaMemcpy(dw.p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
      double worst = 0;
      for (int ntok : {1, 2, 3, 8}) {
        const auto x = make_x(rng_, ntok, sh.cols);
        const bool odd = (ntok & 1) != 0;
        const int64_t xs = sh.cols + (odd ? 5 : 0), xo = odd ? 1 : 0, ys = sh.rows + (odd ? 3 : 0);
        const std::string what = std::string(bf16 ? "bf16 " : "f16 ") + std::to_string(sh.rows) + "x" +
                                 std::to_string(sh.cols) + " ntok " + std::to_string(ntok);
        const GemvCheck r = check_gemv(
            w, sh.rows, sh.cols, x, ntok, xs, xo, ys,
            [&](cuda::CRows xr, cuda::Rows yr) {
              return cuda::launch_gemv16(bf16, dw.as<uint16_t>(), sh.rows, sh.cols, stride, xr, yr, nullptr);
            },
            what);
        worst = std::max(worst, r.worst);
      }
      std::printf("gemv %-5s %6lld x %-6lld worst rel err %.2e\n", bf16 ? "bf16" : "f16",
                  static_cast<long long>(sh.rows), static_cast<long long>(sh.cols), worst);
    }
  }
}

// Every row-warp count and cluster split the planner may choose, forced, on one shape per kind.
TEST_F(QuantGemv, EveryPlanMatchesReference) {
  const int64_t rows = 100, cols = 4096;
  for (int wk = 0; wk <= 4; ++wk) {
    const auto kind = static_cast<cuda::GemvWeights>(wk);
    std::vector<float> w;
    std::unique_ptr<QuantWeights> qw;
    std::unique_ptr<DevBuf> dw;
    if (wk <= 2) {
      qw = std::make_unique<QuantWeights>(static_cast<QuantKind>(wk), rows, cols, rng_);
      w = qw->w;
    } else {
      std::vector<uint16_t> bits(static_cast<size_t>(rows * cols));
      w.resize(bits.size());
      const auto v = normal(rng_, bits.size(), 0.05f, false);
      for (size_t i = 0; i < bits.size(); ++i) {
        bits[i] = wk == 4 ? fp32_to_bf16(v[i]) : fp32_to_fp16(v[i]);
        w[i] = wk == 4 ? bf16_to_fp32(bits[i]) : fp16_to_fp32(bits[i]);
      }
      dw = std::make_unique<DevBuf>(bits.size() * 2);
      HS_CU(cudaMemcpy(dw->p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
    }
    const int ntok = 3;
    const auto x = make_x(rng_, ntok, cols);
    const int64_t gcols = cuda::gemv_group_cols(kind);
    const int64_t groups = (cols + gcols - 1) / gcols;
    const cuda::GemvPlan auto_plan = cuda::plan_gemv(kind, rows, cols, ntok, 132);
    ASSERT_GT(auto_plan.slice_groups, 0);
    for (int rw : {1, 2, 4, 8}) {
      for (int ck : {1, 2, 3, 5, 8}) {
        cuda::GemvPlan p;
        p.rw = rw;
        p.slice_groups = (groups + ck - 1) / ck;
        p.ck = static_cast<int>((groups + p.slice_groups - 1) / p.slice_groups);
        p.smem_bytes = cuda::gemv_smem_bytes(kind, p.slice_groups, ntok);
        const std::string what = "kind " + std::to_string(wk) + " rw " + std::to_string(rw) + " ck " + std::to_string(p.ck);
        check_gemv(
            w, rows, cols, x, ntok, cols, 0, rows,
            [&](cuda::CRows xr, cuda::Rows yr) {
              if (wk <= 2)
                return cuda::launch_gemv_quant(static_cast<QuantKind>(wk), qw->dev.as<uint8_t>(), rows, cols,
                                               qw->row_bytes, xr, yr, nullptr, &p);
              return cuda::launch_gemv16(wk == 4, dw->as<uint16_t>(), rows, cols, cols, xr, yr, nullptr, &p);
            },
            what);
      }
    }
  }
}

TEST_F(QuantGemv, RefusesBadShapes) {
  DevBuf buf(1 << 20);
  ASSERT_NE(buf.p, nullptr);
  const cuda::CRows x9{buf.as<float>(), 9, 256, 256};
  const cuda::Rows y9{buf.as<float>(), 9, 4, 4};
  EXPECT_EQ(cuda::launch_gemv_quant(QuantKind::kQ4_0, buf.as<uint8_t>(), 4, 256, 144, x9, y9, nullptr),
            cudaErrorInvalidValue);  // 9 tokens
  const cuda::CRows x{buf.as<float>(), 1, 100, 100};
  const cuda::Rows y{buf.as<float>(), 1, 4, 4};
  EXPECT_EQ(cuda::launch_gemv_quant(QuantKind::kQ4_0, buf.as<uint8_t>(), 4, 100, 144, x, y, nullptr),
            cudaErrorInvalidValue);  // cols not a multiple of 32
  const cuda::CRows x256{buf.as<float>(), 1, 256, 256};
  EXPECT_EQ(cuda::launch_gemv_quant(QuantKind::kQ4_0, buf.as<uint8_t>(), 4, 256, 100, x256, y, nullptr),
            cudaErrorInvalidValue);  // row bytes too small
  EXPECT_EQ(cuda::launch_gemv16(false, buf.as<uint16_t>(), 4, 256, 250, x256, y, nullptr),
            cudaErrorInvalidValue);  // stride < cols
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- device: dequantize and embedding ------------------------------------------------------

TEST_F(QuantGemv, DequantizeMatchesHost) {
  for (QuantKind k : kKinds) {
    for (const Shape& sh : std::vector<Shape>{{37, 4096}, {3, 96}, {2, 14336}}) {
      if (!cuda::quant_cols_valid(k, sh.cols)) continue;
      const int64_t rb = cuda::quant_device_row_bytes(k, sh.cols);
      auto gguf = random_gguf(k, sh.rows, sh.cols, rng_);
      if (k != QuantKind::kQ4_K) {  // one huge scale: values past f16's range must clamp
        const uint16_t big = fp32_to_fp16(60000.0f);
        std::memcpy(gguf.data(), &big, 2);
      }
      const auto w = dequant_ref(k, gguf, sh.rows, sh.cols);
      const auto bytes = repack(k, gguf, sh.rows, sh.cols, rb);
      DevBuf dw(bytes.size()), dout(static_cast<size_t>(sh.rows * sh.cols) * 2);
      ASSERT_TRUE(dw.p && dout.p);
      HS_CU(cudaMemcpy(dw.p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
      HS_CU(cuda::launch_dequantize_quant(k, dw.as<uint8_t>(), sh.rows, sh.cols, rb, dout.as<uint16_t>(), nullptr));
      HS_CU(cudaDeviceSynchronize());
      std::vector<uint16_t> got(static_cast<size_t>(sh.rows * sh.cols));
      HS_CU(cudaMemcpy(got.data(), dout.p, got.size() * 2, cudaMemcpyDeviceToHost));
      int64_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const float v = std::clamp(w[i], -65504.0f, 65504.0f);
        const uint16_t want = fp32_to_fp16(v);
        if (got[i] != want && bad++ < 3)
          ADD_FAILURE() << kind_name(k) << " " << sh.rows << "x" << sh.cols << " element " << i << ": 0x" << std::hex
                        << got[i] << " vs 0x" << want << std::dec << " (" << w[i] << "); " << seed_note();
      }
    }
  }
}

TEST_F(QuantGemv, EmbeddingMatchesDequantizeRow) {
  for (QuantKind k : kKinds) {
    const int64_t rows = 50, cols = 4096;
    QuantWeights qw(k, rows, cols, rng_);
    ASSERT_NE(qw.dev.p, nullptr);
    for (int64_t stride : {cols, cols + 3}) {  // float4 and scalar stores
      const int64_t n = 9;
      std::vector<int32_t> tok(static_cast<size_t>(n));
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(rows - 1));
      for (auto& t : tok) t = pick(rng_);
      DevBuf dt(tok.size() * 4), dout(static_cast<size_t>(n * stride) * 4);
      ASSERT_TRUE(dt.p && dout.p);
      HS_CU(cudaMemcpy(dt.p, tok.data(), tok.size() * 4, cudaMemcpyHostToDevice));
      HS_CU(cudaMemset(dout.p, 0xFF, static_cast<size_t>(n * stride) * 4));
      const cuda::Rows out{dout.as<float>(), n, cols, stride};
      HS_CU(cuda::launch_embedding_quant(k, qw.dev.as<uint8_t>(), cols, qw.row_bytes, dt.as<int32_t>(), out, nullptr));
      HS_CU(cudaDeviceSynchronize());
      std::vector<float> got(static_cast<size_t>(n * stride));
      HS_CU(cudaMemcpy(got.data(), dout.p, got.size() * 4, cudaMemcpyDeviceToHost));
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < cols; ++c) {
          const float want = qw.w[static_cast<size_t>(tok[static_cast<size_t>(i)] * cols + c)];
          const float g = got[static_cast<size_t>(i * stride + c)];
          if (std::memcmp(&want, &g, 4) != 0 && bad++ < 3)
            ADD_FAILURE() << kind_name(k) << " token " << tok[static_cast<size_t>(i)] << " col " << c << ": " << g
                          << " vs " << want << "; " << seed_note();
        }
    }
  }
}

// ---- device: bandwidth (HS_GEMV_BENCH=1 only) ------------------------------------------------

// Prints the achieved weight-read rate of every launcher on the 8B-llama decode shapes at
// 1, 2, 4 and 8 tokens (cudaEvent timing, median of 15 x 10 launches after a warm-up; the
// weights are a byte pattern: speed does not depend on the values). Skipped unless
// HS_GEMV_BENCH=1.
TEST_F(QuantGemv, Bandwidth) {
  const char* env = std::getenv("HS_GEMV_BENCH");
  if (!env || std::string(env) != "1") GTEST_SKIP() << "set HS_GEMV_BENCH=1";
  int dev = 0, n_sm = 0;
  HS_CU(cudaGetDevice(&dev));
  HS_CU(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
  const std::vector<Shape> shapes = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
  const char* names[] = {"Q4_0", "Q8_0", "Q4_K", "f16", "bf16"};
  cudaEvent_t e0, e1;
  HS_CU(cudaEventCreate(&e0));
  HS_CU(cudaEventCreate(&e1));
  DevBuf x(static_cast<size_t>(8 * 14336) * 4), y(static_cast<size_t>(8 * 128256) * 4);
  ASSERT_TRUE(x.p && y.p);
  {
    const auto xv = normal(rng_, 8 * 14336);
    HS_CU(cudaMemcpy(x.p, xv.data(), xv.size() * 4, cudaMemcpyHostToDevice));
  }
  std::printf("%-5s %-13s %5s  %-22s %9s %9s\n", "w", "shape", "ntok", "plan (rw ck slice)", "us", "GB/s");
  for (int wk = 0; wk <= 4; ++wk) {
    for (const Shape& sh : shapes) {
      const int64_t row_bytes =
          wk <= 2 ? cuda::quant_device_row_bytes(static_cast<QuantKind>(wk), sh.cols) : sh.cols * 2;
      const size_t bytes = static_cast<size_t>(sh.rows * row_bytes);
      DevBuf w(bytes);
      ASSERT_NE(w.p, nullptr);
      HS_CU(cudaMemset(w.p, 0x11, bytes));
      for (int ntok : {1, 2, 4, 8}) {
        const cuda::CRows xr{x.as<float>(), ntok, sh.cols, sh.cols};
        const cuda::Rows yr{y.as<float>(), ntok, sh.rows, sh.rows};
        auto launch = [&] {
          return wk <= 2 ? cuda::launch_gemv_quant(static_cast<QuantKind>(wk), w.as<uint8_t>(), sh.rows, sh.cols,
                                                   row_bytes, xr, yr, nullptr)
                         : cuda::launch_gemv16(wk == 4, w.as<uint16_t>(), sh.rows, sh.cols, sh.cols, xr, yr, nullptr);
        };
        HS_CU(launch());
        HS_CU(cudaDeviceSynchronize());
        std::vector<float> us;
        for (int rep = 0; rep < 15; ++rep) {
          HS_CU(cudaEventRecord(e0));
          for (int i = 0; i < 10; ++i) HS_CU(launch());
          HS_CU(cudaEventRecord(e1));
          HS_CU(cudaEventSynchronize(e1));
          float ms = 0;
          HS_CU(cudaEventElapsedTime(&ms, e0, e1));
          us.push_back(ms * 100.0f);  // per launch, in us
        }
        std::sort(us.begin(), us.end());
        const float t = us[us.size() / 2];
        const cuda::GemvPlan p = cuda::plan_gemv(static_cast<cuda::GemvWeights>(wk), sh.rows, sh.cols, ntok, n_sm);
        const std::string shape = std::to_string(sh.rows) + "x" + std::to_string(sh.cols);
        const std::string plan = std::to_string(p.rw) + " " + std::to_string(p.ck) + " " + std::to_string(p.slice_groups);
        std::printf("%-5s %-13s %5d  %-22s %9.2f %9.1f\n", names[wk], shape.c_str(), ntok, plan.c_str(), t,
                    static_cast<double>(bytes) / (t * 1e3));
      }
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

// ---- device: the quantized tensor-core GEMM (9..128 tokens) ----------------------------------

// Checks launch_gemm_quant_mma (plan: null = the planner's) for x [ntok][cols] against the
// double sum over w16 (the weights the kernel should multiply) and x rounded to f16, within
// tol * sum |w||x| per output; y's padding rows must stay NaN.
GemvCheck check_gemm(QuantKind k, const QuantWeights& qw, const std::vector<float>& w16, int64_t rows, int64_t cols,
                     const std::vector<float>& x, int ntok, const cuda::GemmQuantPlan* plan, double tol,
                     const std::string& what, bool warp_small = false) {
  GemvCheck res;
  const int64_t xs = (cols + 8 + 7) / 8 * 8;  // strided x: padding columns hold a large poison
  const int64_t ys = rows + 3;
  std::vector<uint16_t> xh(static_cast<size_t>(ntok * xs), fp32_to_fp16(60000.0f));
  std::vector<float> xr(static_cast<size_t>(ntok * cols));
  for (int t = 0; t < ntok; ++t)
    for (int64_t c = 0; c < cols; ++c) {
      const uint16_t h = fp32_to_fp16(x[static_cast<size_t>(t * cols + c)]);
      xh[static_cast<size_t>(t * xs + c)] = h;
      xr[static_cast<size_t>(t * cols + c)] = fp16_to_fp32(h);
    }
  DevBuf dx(xh.size() * 2), dy(static_cast<size_t>(ntok * ys) * 4);
  EXPECT_TRUE(dx.p && dy.p);
  if (!dx.p || !dy.p) return res;
  EXPECT_EQ(cudaMemcpy(dx.p, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dy.p, 0xFF, static_cast<size_t>(ntok * ys) * 4), cudaSuccess);  // NaN
  const cuda::Rows yr{dy.as<float>(), ntok, rows, ys};
  const cudaError_t e = cuda::launch_gemm_quant_mma(k, qw.dev.as<uint8_t>(), rows, cols, qw.row_bytes,
                                                    dx.as<uint16_t>(), xs, ntok, yr, nullptr, false, plan, warp_small);
  EXPECT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
  const cudaError_t es = cudaDeviceSynchronize();
  EXPECT_EQ(es, cudaSuccess) << what << ": " << cudaGetErrorString(es);
  if (e != cudaSuccess || es != cudaSuccess) {
    res.bad = 1;
    return res;
  }
  std::vector<float> y(static_cast<size_t>(ntok * ys));
  EXPECT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return compare_y(w16, rows, cols, xr, ntok, y, ys, tol, what);
}

// The weights the GEMM multiplies: Q4_0 / Q8_0 the dequantized floats rounded to f16 (exact
// products of a small integer and an f16 scale, rounded once); Q4_K the exact floats (its f16
// weight rounds twice more, hence its looser tolerance).
std::vector<float> gemm_weights(QuantKind k, const std::vector<float>& w) {
  if (k == QuantKind::kQ4_K) return w;
  std::vector<float> r(w.size());
  for (size_t i = 0; i < w.size(); ++i) r[i] = fp16_to_fp32(fp32_to_fp16(w[i]));
  return r;
}
double gemm_tol(QuantKind k) { return k == QuantKind::kQ4_K ? 4e-3 : 1e-5; }

TEST_F(QuantGemv, GemmMatchesReference) {
  const std::vector<Shape> shapes = {{67, 96}, {37, 544}, {300, 1024}, {129, 4096}, {1000, 256}, {5, 160}};
  for (QuantKind k : kKinds) {
    for (const Shape& sh : shapes) {
      if (!cuda::quant_cols_valid(k, sh.cols)) continue;
      QuantWeights qw(k, sh.rows, sh.cols, rng_);
      ASSERT_NE(qw.dev.p, nullptr);
      const auto w16 = gemm_weights(k, qw.w);
      double worst = 0;
      for (int ntok : {5, 8, 9, 16, 17, 32, 33, 40, 64, 100, 128}) {
        const auto x = normal(rng_, static_cast<size_t>(ntok * sh.cols), 1.0f, true);
        const std::string what = std::string(kind_name(k)) + " " + std::to_string(sh.rows) + "x" +
                                 std::to_string(sh.cols) + " ntok " + std::to_string(ntok);
        const GemvCheck r = check_gemm(k, qw, w16, sh.rows, sh.cols, x, ntok, nullptr, gemm_tol(k), what);
        worst = std::max(worst, r.worst);
        if (ntok <= 8) {  // the barrier-free variant
          const GemvCheck rw = check_gemm(k, qw, w16, sh.rows, sh.cols, x, ntok, nullptr, gemm_tol(k),
                                          what + " (warp variant)", true);
          worst = std::max(worst, rw.worst);
        }
      }
      std::printf("gemm %-5s %6lld x %-6lld worst rel err %.2e\n", kind_name(k), static_cast<long long>(sh.rows),
                  static_cast<long long>(sh.cols), worst);
    }
  }
}

// Up to 4 weights in one launch (a Gated-DeltaNet layer's qkv / z / beta / alpha): each output as
// the reference, the 48-row weights included; an empty weight writes nothing.
TEST_F(QuantGemv, GemmMultiMatchesReference) {
  const int64_t cols = 1024;
  const std::vector<int64_t> rows = {1000, 48, 0, 129};
  for (QuantKind k : kKinds) {
    std::vector<std::unique_ptr<QuantWeights>> qw;
    std::vector<std::vector<float>> w16;
    for (int64_t r : rows) {
      qw.push_back(std::make_unique<QuantWeights>(k, std::max<int64_t>(r, 1), cols, rng_));
      w16.push_back(gemm_weights(k, qw.back()->w));
    }
    for (int run = 0; run < 5; ++run) {
      const int ntok = run < 3 ? (run == 0 ? 5 : run == 1 ? 8 : 33) : (run == 3 ? 5 : 8);
      const bool warp_small = run >= 3;  // the barrier-free variant
      const auto x = normal(rng_, static_cast<size_t>(ntok * cols), 1.0f, true);
      std::vector<uint16_t> xh(x.size());
      std::vector<float> xr(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        xh[i] = fp32_to_fp16(x[i]);
        xr[i] = fp16_to_fp32(xh[i]);
      }
      DevBuf dx(xh.size() * 2);
      ASSERT_NE(dx.p, nullptr);
      HS_CU(cudaMemcpy(dx.p, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
      std::vector<std::unique_ptr<DevBuf>> dy;
      cuda::GemmQuantOut outs[4];
      for (size_t i = 0; i < rows.size(); ++i) {
        const int64_t ys = rows[i] + 2;
        dy.push_back(std::make_unique<DevBuf>(static_cast<size_t>(ntok * ys) * 4));
        HS_CU(cudaMemset(dy.back()->p, 0xFF, static_cast<size_t>(ntok * ys) * 4));
        outs[i] = cuda::GemmQuantOut{qw[i]->dev.as<uint8_t>(), rows[i], qw[i]->row_bytes,
                                     cuda::Rows{dy.back()->as<float>(), ntok, rows[i], ys}};
      }
      HS_CU(cuda::launch_gemm_quant_mma_multi(k, 4, outs, cols, dx.as<uint16_t>(), cols, ntok, nullptr, false, nullptr,
                                              warp_small));
      HS_CU(cudaDeviceSynchronize());
      for (size_t i = 0; i < rows.size(); ++i) {
        const int64_t ys = rows[i] + 2;
        std::vector<float> y(static_cast<size_t>(ntok * ys));
        HS_CU(cudaMemcpy(y.data(), dy[i]->p, y.size() * 4, cudaMemcpyDeviceToHost));
        compare_y(w16[i], rows[i], cols, xr, ntok, y, ys, gemm_tol(k),
                     std::string(kind_name(k)) + " multi weight " + std::to_string(i) + " ntok " + std::to_string(ntok) +
                         (warp_small ? " (warp variant)" : ""));
      }
    }
  }
}

TEST_F(QuantGemv, GemmEveryPlanMatchesReference) {
  const int64_t rows = 200, cols = 2048;  // 16 chunks of 128 columns
  for (QuantKind k : kKinds) {
    QuantWeights qw(k, rows, cols, rng_);
    ASSERT_NE(qw.dev.p, nullptr);
    const auto w16 = gemm_weights(k, qw.w);
    const int ntok = 21;
    const auto x = normal(rng_, static_cast<size_t>(ntok * cols), 1.0f, true);
    for (int tiles : {3, 4}) {
      for (int ck : {1, 2, 3, 5, 8}) {
        cuda::GemmQuantPlan p;
        p.n_tiles = tiles;
        p.token_blocks = (ntok + 8 * tiles - 1) / (8 * tiles);
        p.slice_chunks = (16 + ck - 1) / ck;
        p.ck = (16 + p.slice_chunks - 1) / p.slice_chunks;
        const std::string what = std::string(kind_name(k)) + " tiles " + std::to_string(tiles) + " ck " +
                                 std::to_string(p.ck);
        check_gemm(k, qw, w16, rows, cols, x, ntok, &p, gemm_tol(k), what);
      }
    }
    // Two token blocks of one tile: tokens 0..7 and 8..15 of 13.
    cuda::GemmQuantPlan p{1, 2, 2, 8};
    check_gemm(k, qw, w16, rows, cols, x, 13, &p, gemm_tol(k), std::string(kind_name(k)) + " 2 x 1 tile");
  }
}

TEST_F(QuantGemv, GemmRefusesBadShapes) {
  DevBuf buf(1 << 20);
  ASSERT_NE(buf.p, nullptr);
  const cuda::Rows y{buf.as<float>(), 9, 4, 4};
  const int64_t rb = cuda::quant_device_row_bytes(QuantKind::kQ4_0, 256);
  EXPECT_EQ(cuda::launch_gemm_quant_mma(QuantKind::kQ4_0, buf.as<uint8_t>(), 4, 256, rb, buf.as<uint16_t>(), 256, 9, y,
                                        nullptr),
            cudaSuccess);
  const cuda::Rows y129{buf.as<float>(), 129, 4, 4};
  EXPECT_EQ(cuda::launch_gemm_quant_mma(QuantKind::kQ4_0, buf.as<uint8_t>(), 4, 256, rb, buf.as<uint16_t>(), 256, 129,
                                        y129, nullptr),
            cudaErrorInvalidValue);  // 129 tokens
  EXPECT_EQ(cuda::launch_gemm_quant_mma(QuantKind::kQ4_0, buf.as<uint8_t>(), 4, 100, rb, buf.as<uint16_t>(), 256, 9, y,
                                        nullptr),
            cudaErrorInvalidValue);  // cols not a multiple of 32
  EXPECT_EQ(cuda::launch_gemm_quant_mma(QuantKind::kQ4_0, buf.as<uint8_t>(), 4, 256, 100, buf.as<uint16_t>(), 256, 9, y,
                                        nullptr),
            cudaErrorInvalidValue);  // row bytes too small
  EXPECT_EQ(cuda::launch_gemm_quant_mma(QuantKind::kQ4_0, buf.as<uint8_t>(), 4, 256, rb, buf.as<uint16_t>() + 1, 256, 9,
                                        y, nullptr),
            cudaErrorInvalidValue);  // x not 16-byte aligned
  cuda::GemmQuantPlan bad{4, 1, 3, 1};  // 3 slices of 1 chunk for 2 chunks: an empty slice
  EXPECT_EQ(cuda::launch_gemm_quant_mma(QuantKind::kQ4_0, buf.as<uint8_t>(), 4, 256, rb, buf.as<uint16_t>(), 256, 9, y,
                                        nullptr, false, &bad),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// HS_GEMV_BENCH=1: the GEMM's weight-read rate against dequantize + the planner's shapes.
TEST_F(QuantGemv, GemmBandwidth) {
  const char* env = std::getenv("HS_GEMV_BENCH");
  if (!env || std::string(env) != "1") GTEST_SKIP() << "set HS_GEMV_BENCH=1";
  const std::vector<Shape> shapes = {{17408, 5120}, {5120, 17408}, {10240, 5120}, {5120, 6144}, {14336, 4096}, {4096, 4096}};
  cudaEvent_t e0, e1;
  HS_CU(cudaEventCreate(&e0));
  HS_CU(cudaEventCreate(&e1));
  DevBuf x(static_cast<size_t>(128 * 17408) * 2), y(static_cast<size_t>(128 * 17408) * 4);
  ASSERT_TRUE(x.p && y.p);
  HS_CU(cudaMemset(x.p, 0x11, static_cast<size_t>(128 * 17408) * 2));
  int dev = 0, n_sm = 0;
  HS_CU(cudaGetDevice(&dev));
  HS_CU(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
  std::printf("%-5s %-13s %5s  %-16s %9s %9s\n", "w", "shape", "ntok", "plan (nt zb ck)", "us", "GB/s");
  for (QuantKind k : kKinds) {
    for (const Shape& sh : shapes) {
      const int64_t row_bytes = cuda::quant_device_row_bytes(k, sh.cols);
      const size_t bytes = static_cast<size_t>(sh.rows * row_bytes);
      DevBuf w(bytes);
      ASSERT_NE(w.p, nullptr);
      HS_CU(cudaMemset(w.p, 0x11, bytes));
      // The planner's choice, then (8 and 32 tokens) every cluster split forced: its cost model's check.
      std::vector<std::pair<int, int>> runs;  // (ntok, forced ck or 0)
      for (int ntok : {5, 8, 9, 16, 32, 64, 128}) runs.push_back({ntok, 0});
      for (int ntok : {5, 8}) runs.push_back({ntok, -1});  // -1: the barrier-free variant
      for (int ntok : {8, 32})
        for (int ck : {1, 2, 4, 8}) runs.push_back({ntok, ck});
      for (const auto& [ntok, force_ck] : runs) {
        const cuda::Rows yr{y.as<float>(), ntok, sh.rows, sh.rows};
        cuda::GemmQuantPlan p = cuda::plan_gemm_quant(k, sh.rows, sh.cols, ntok, n_sm);
        const bool warp_small = force_ck < 0;
        if (force_ck > 0) {
          const int n_chunks = static_cast<int>((sh.cols + 127) / 128);
          p.slice_chunks = (n_chunks + force_ck - 1) / force_ck;
          p.ck = (n_chunks + p.slice_chunks - 1) / p.slice_chunks;
        }
        auto launch = [&] {
          return cuda::launch_gemm_quant_mma(k, w.as<uint8_t>(), sh.rows, sh.cols, row_bytes, x.as<uint16_t>(), sh.cols,
                                             ntok, yr, nullptr, false, warp_small ? nullptr : &p, warp_small);
        };
        HS_CU(launch());
        HS_CU(cudaDeviceSynchronize());
        std::vector<float> us;
        for (int rep = 0; rep < 9; ++rep) {
          HS_CU(cudaEventRecord(e0));
          for (int i = 0; i < 10; ++i) HS_CU(launch());
          HS_CU(cudaEventRecord(e1));
          HS_CU(cudaEventSynchronize(e1));
          float ms = 0;
          HS_CU(cudaEventElapsedTime(&ms, e0, e1));
          us.push_back(ms * 100.0f);
        }
        std::sort(us.begin(), us.end());
        const float t = us[us.size() / 2];
        const std::string shape = std::to_string(sh.rows) + "x" + std::to_string(sh.cols);
        const std::string plan = std::to_string(p.n_tiles) + " " + std::to_string(p.token_blocks) + " " +
                                 std::to_string(p.ck) + (force_ck > 0 ? " (forced)" : warp_small ? " (warp variant)" : "");
        std::printf("%-5s %-13s %5d  %-16s %9.2f %9.1f\n", kind_name(k), shape.c_str(), ntok, plan.c_str(), t,
                    static_cast<double>(bytes) / (t * 1e3));
      }
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

#else  // !HS_WITH_CUDA

TEST(QuantGemv, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace hs
