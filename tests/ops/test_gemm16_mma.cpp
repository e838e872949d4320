// tests/ops/test_gemm16_mma.cpp — the tensor-core decode GEMM of 16-bit weights for 1..8 token
// rows (launch_gemm16_mma, backend/cuda/gemm16_mma.cu), called directly with cudaMalloc'd buffers.
//
// Gemm16Mma.*: on the GPU (skips without a device), against a double-precision reference of the
//   exact 16-bit weight and x values: |y - ref| <= 2e-5 * sum_c |W[r][c]| |x[t][c]| (exact
//   products, fp32 sums); 1..3 weights of different row counts (0 and rows not a multiple of
//   the 32-row tile included) in one launch, padded weight rows, strided y whose padding must
//   stay NaN, 1..8 tokens, every forced warp count; the same launch twice gives the same bits.
// Gemm16Mma.Bandwidth (HS_GEMV_BENCH=1 only): the 8B-llama decode shapes at 4 and 8 tokens next
//   to cuBLAS (cublasGemmEx, the path it replaces) and a cudaMemcpy D2D rate measured here.
// Inputs are fresh each run (HS_TEST_SEED=<n> replays; the seed is in every failure message).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/fp16.h"
#include "ops_test_util.h"

#if defined(HS_WITH_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/gemm16_mma.h"
#include "cuda_test_util.h"
#endif

namespace hs {
namespace {

#if defined(HS_WITH_CUDA)

using cuda_test::DevBuf;
using cuda_test::have_device;
using ops_test::normal;
using ops_test::seed_note;
using ops_test::test_seed;

#define HS_CU(expr)                                                                                          \
  do {                                                                                                       \
    const cudaError_t hs_e_ = (expr);                                                                        \
    ASSERT_EQ(hs_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(hs_e_) << "; " << seed_note(); \
  } while (0)

class Gemm16Mma : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^ std::hash<std::string>{}(info->name()));
  }
  std::mt19937_64 rng_;
};

// 16-bit bits of n values and their exact floats.
struct Half16 {
  std::vector<uint16_t> bits;
  std::vector<float> val;
};
Half16 to16(bool bf16, const std::vector<float>& v) {
  Half16 h;
  h.bits.resize(v.size());
  h.val.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    h.bits[i] = bf16 ? fp32_to_bf16(v[i]) : fp32_to_fp16(v[i]);
    h.val[i] = bf16 ? bf16_to_fp32(h.bits[i]) : fp16_to_fp32(h.bits[i]);
  }
  return h;
}

struct Weight {
  int64_t rows = 0, cols = 0, stride = 0;
  std::vector<float> val;  // [rows][cols]
  std::unique_ptr<DevBuf> dev;
};

Weight make_weight(bool bf16, int64_t rows, int64_t cols, int64_t pad, std::mt19937_64& rng) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.stride = cols + pad;
  const Half16 h = to16(bf16, normal(rng, static_cast<size_t>(rows * cols), 0.5f, true));
  std::vector<uint16_t> bits(static_cast<size_t>(std::max<int64_t>(1, rows * w.stride)), 0x7e00);  // pad: NaN
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(h.bits.begin() + r * cols, cols, bits.begin() + r * w.stride);
  w.val = h.val;
  w.dev = std::make_unique<DevBuf>(bits.size() * 2);
  if (w.dev->p) cudaMemcpy(w.dev->p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice);
  return w;
}

struct MmaRun {
  cudaError_t launch = cudaSuccess, sync = cudaSuccess;
  std::vector<std::vector<float>> y;  // [weight][ntok * (rows + y_pad)]
};

MmaRun run(bool bf16, const std::vector<Weight*>& ws, const DevBuf& dx, int ntok, int64_t cols, int64_t y_pad, int warps,
           int variant = -1, bool pdl = false) {
  MmaRun out;
  cudaStream_t st = nullptr;  // PDL launches go on a created stream, not the legacy one
  if (pdl && cudaStreamCreate(&st) != cudaSuccess) st = nullptr;
  std::vector<std::unique_ptr<DevBuf>> dy;
  std::vector<cuda::Rows> yr;
  std::vector<const uint16_t*> wp;
  std::vector<int64_t> rows, strides;
  for (const Weight* w : ws) {
    const int64_t ys = w->rows + y_pad;
    dy.push_back(std::make_unique<DevBuf>(static_cast<size_t>(ntok * ys) * 4));
    cudaMemset(dy.back()->p, 0xFF, static_cast<size_t>(ntok * ys) * 4);  // NaN
    yr.push_back(cuda::Rows{dy.back()->as<float>(), ntok, w->rows, ys});
    wp.push_back(w->dev->as<uint16_t>());
    rows.push_back(w->rows);
    strides.push_back(w->stride);
  }
  out.launch = cuda::launch_gemm16_mma(bf16, static_cast<int>(ws.size()), wp.data(), rows.data(), cols, strides.data(),
                                       dx.as<uint16_t>(), ntok, yr.data(), st, warps, variant, pdl);
  out.sync = cudaDeviceSynchronize();
  if (st) cudaStreamDestroy(st);
  for (size_t i = 0; i < ws.size(); ++i) {
    std::vector<float> h(static_cast<size_t>(ntok * yr[i].stride));
    cudaMemcpy(h.data(), dy[i]->p, h.size() * 4, cudaMemcpyDeviceToHost);
    out.y.push_back(std::move(h));
  }
  return out;
}

TEST_F(Gemm16Mma, MatchesReference) {
  struct Case {
    std::vector<int64_t> rows;
    int64_t cols;
  };
  const std::vector<Case> cases = {
      {{37}, 32}, {{64, 17, 1}, 96}, {{5, 0, 70}, 224}, {{129, 33, 2}, 1024}, {{1024, 256, 256}, 4096}, {{300}, 14336},
  };
  for (bool bf16 : {false, true}) {
    for (const Case& cs : cases) {
      const int64_t cols = cs.cols;
      std::vector<Weight> wv;
      for (size_t i = 0; i < cs.rows.size(); ++i) wv.push_back(make_weight(bf16, cs.rows[i], cols, i == 1 ? 8 : 0, rng_));
      std::vector<Weight*> ws;
      for (auto& w : wv) {
        ASSERT_NE(w.dev->p, nullptr);
        ws.push_back(&w);
      }
      for (int ntok : {1, 3, 5, 8}) {
        const int64_t y_pad = ntok % 2 ? 3 : 0;
        const Half16 x = to16(bf16, normal(rng_, static_cast<size_t>(ntok * cols), 1.0f, true));
        DevBuf dx(x.bits.size() * 2);
        ASSERT_NE(dx.p, nullptr);
        HS_CU(cudaMemcpy(dx.p, x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice));
        std::string what = std::string(bf16 ? "bf16" : "f16") + " cols " + std::to_string(cols) + " rows";
        for (int64_t r : cs.rows) what += " " + std::to_string(r);
        what += " ntok " + std::to_string(ntok);
        const MmaRun first = run(bf16, ws, dx, ntok, cols, y_pad, 0);
        ASSERT_EQ(first.launch, cudaSuccess) << what << ": " << cudaGetErrorString(first.launch);
        ASSERT_EQ(first.sync, cudaSuccess) << what << ": " << cudaGetErrorString(first.sync);
        // Every forced warp count with the default load scheme, then every scheme.
        const std::vector<std::tuple<int, int, bool>> cuts = {{0, -1, false}, {1, -1, false}, {3, -1, false},
                                                              {16, -1, false}, {0, 1, false}, {0, 2, true},
                                                              {5, 3, false}};
        for (const auto& [warps, variant, pdl] : cuts) {
          const MmaRun r = run(bf16, ws, dx, ntok, cols, y_pad, warps, variant, pdl);
          ASSERT_EQ(r.launch, cudaSuccess) << what << " warps " << warps;
          ASSERT_EQ(r.sync, cudaSuccess) << what << " warps " << warps;
          double worst = 0;
          int64_t bad = 0;
          for (size_t i = 0; i < ws.size(); ++i) {
            const Weight& w = *ws[i];
            const int64_t ys = w.rows + y_pad;
            const std::vector<float>& y = r.y[i];
            if (warps == 0 && variant == -1) {  // the default launch again: the same bits
              EXPECT_EQ(std::memcmp(y.data(), first.y[i].data(), y.size() * 4), 0) << what << ": not deterministic";
            }
            for (int64_t row = 0; row < w.rows; ++row)
              for (int t = 0; t < ntok; ++t) {
                double ref = 0, mag = 0;
                const float* wr = w.val.data() + row * cols;
                const float* xt = x.val.data() + t * cols;
                for (int64_t c = 0; c < cols; ++c) {
                  ref += static_cast<double>(wr[c]) * xt[c];
                  mag += std::fabs(static_cast<double>(wr[c]) * xt[c]);
                }
                const double got = y[static_cast<size_t>(t * ys + row)];
                const double err = std::fabs(got - ref) / std::max(mag, 1e-300);
                if (!(err <= 2e-5) && bad++ < 3)
                  ADD_FAILURE() << what << " warps " << warps << " variant " << variant << ": weight " << i << " y[" << t << "][" << row
                                << "] = " << got << ", ref " << ref << " (rel " << err << "); " << seed_note();
                if (std::isfinite(err)) worst = std::max(worst, err);
              }
            for (int t = 0; t < ntok; ++t)
              for (int64_t row = w.rows; row < ys; ++row)
                if (!std::isnan(y[static_cast<size_t>(t * ys + row)]) && bad++ < 3)
                  ADD_FAILURE() << what << ": weight " << i << " wrote y padding [" << t << "][" << row << "]";
          }
          if (warps == 0 && variant == -1) std::printf("%s: worst |y - ref| / sum |wx| %.2e\n", what.c_str(), worst);
        }
      }
    }
  }
}

TEST_F(Gemm16Mma, RejectsWhatItCannotRun) {
  DevBuf w(64 * 1024), x(64 * 1024), y(64 * 1024);
  const uint16_t* wp = w.as<uint16_t>();
  const int64_t rows = 16, stride = 64;
  cuda::Rows yr{y.as<float>(), 4, 16, 16};
  auto launch = [&](int64_t cols, int ntok, int64_t st, const uint16_t* xp, int warps = 0) {
    cuda::Rows r = yr;
    r.rows = ntok;
    return cuda::launch_gemm16_mma(true, 1, &wp, &rows, cols, &st, xp, ntok, &r, nullptr, warps);
  };
  EXPECT_EQ(launch(64, 4, stride, x.as<uint16_t>()), cudaSuccess);
  EXPECT_EQ(launch(40, 4, stride, x.as<uint16_t>()), cudaErrorInvalidValue);   // cols not a multiple of 32
  EXPECT_EQ(launch(64, 0, stride, x.as<uint16_t>()), cudaErrorInvalidValue);   // no tokens
  EXPECT_EQ(launch(64, 9, stride, x.as<uint16_t>()), cudaErrorInvalidValue);   // too many
  EXPECT_EQ(launch(64, 4, 68, x.as<uint16_t>()), cudaErrorInvalidValue);       // stride not a multiple of 8
  EXPECT_EQ(launch(64, 4, stride, x.as<uint16_t>() + 1), cudaErrorInvalidValue);  // x misaligned
  EXPECT_EQ(launch(64, 4, stride, x.as<uint16_t>(), 17), cudaErrorInvalidValue);  // too many warps
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(Gemm16Mma, Bandwidth) {
  const char* env = std::getenv("HS_GEMV_BENCH");
  if (!env || std::string(env) != "1") GTEST_SKIP() << "set HS_GEMV_BENCH=1";
  cudaStream_t s = nullptr;
  HS_CU(cudaStreamCreate(&s));
  cublasHandle_t blas = nullptr;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  cublasSetStream(blas, s);
  cudaEvent_t e0, e1;
  HS_CU(cudaEventCreate(&e0));
  HS_CU(cudaEventCreate(&e1));
  double copy_gbs = 0;
  {
    const size_t bytes = size_t{1} << 30;
    DevBuf a(bytes), b(bytes);
    ASSERT_TRUE(a.p && b.p);
    HS_CU(cudaMemset(a.p, 1, bytes));
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
      HS_CU(cudaEventRecord(e0, s));
      HS_CU(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s));
      HS_CU(cudaEventRecord(e1, s));
      HS_CU(cudaEventSynchronize(e1));
      float ms = 0;
      HS_CU(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms);
    }
    copy_gbs = 2.0 * static_cast<double>(bytes) / (best * 1e6);
    std::printf("cudaMemcpy D2D 1 GiB: %.1f GB/s (read + write)\n", copy_gbs);
  }
  struct Bench {
    const char* name;
    std::vector<int64_t> rows;
    int64_t cols;
  };
  const std::vector<Bench> benches = {{"q/k/v 4096+1024+1024 x 4096", {4096, 1024, 1024}, 4096},
                                      {"o 4096x4096", {4096}, 4096},
                                      {"gate/up 2 x 14336x4096", {14336, 14336}, 4096},
                                      {"down 4096x14336", {4096}, 14336}};
  DevBuf x(8 * 14336 * 2), y(8 * 2 * 14336 * 4);
  HS_CU(cudaMemset(x.p, 0, 8 * 14336 * 2));
  std::printf("%-30s %4s %12s %9s %12s %9s\n", "weights (bf16)", "ntok", "best mma us", "GB/s", "cuBLAS us", "GB/s");
  for (const Bench& bn : benches) {
    int64_t total = 0;
    for (int64_t r : bn.rows) total += r;
    const size_t wbytes = static_cast<size_t>(total * bn.cols) * 2;
    DevBuf w(wbytes);
    ASSERT_NE(w.p, nullptr);
    HS_CU(cudaMemset(w.p, 0, wbytes));
    std::vector<const uint16_t*> wp;
    std::vector<int64_t> strides;
    int64_t off = 0;
    for (int64_t r : bn.rows) {
      wp.push_back(w.as<uint16_t>() + off * bn.cols);
      strides.push_back(bn.cols);
      off += r;
    }
    for (int ntok : {4, 8}) {
      std::vector<cuda::Rows> yr;
      int64_t yoff = 0;
      for (int64_t r : bn.rows) {
        yr.push_back(cuda::Rows{y.as<float>() + yoff, ntok, r, r});
        yoff += ntok * r;
      }
      auto time = [&](auto&& fn) {
        for (int i = 0; i < 3; ++i) fn();
        float best = 1e30f;
        for (int rep = 0; rep < 20; ++rep) {
          cudaEventRecord(e0, s);
          fn();
          cudaEventRecord(e1, s);
          cudaEventSynchronize(e1);
          float ms = 0;
          cudaEventElapsedTime(&ms, e0, e1);
          best = std::min(best, ms);
        }
        return static_cast<double>(best) * 1e3;  // us
      };
      double us = 1e30;
      std::string best;
      for (int variant = 0; variant < cuda::kGemm16MmaVariants; ++variant)
        for (int warps : {0, 2, 4, 8, 16}) {
          const double t_us = time([&] {
            (void)cuda::launch_gemm16_mma(true, static_cast<int>(bn.rows.size()), wp.data(), bn.rows.data(), bn.cols,
                                          strides.data(), x.as<uint16_t>(), ntok, yr.data(), s, warps, variant);
          });
          std::printf("  %-28s ntok %d %-14s warps %2d: %8.2f us %7.1f GB/s\n", bn.name, ntok,
                      cuda::gemm16_mma_variant_name(variant), warps, t_us, static_cast<double>(wbytes) / (t_us * 1e3));
          if (t_us < us) {
            us = t_us;
            best = std::string(cuda::gemm16_mma_variant_name(variant)) + ", warps " + std::to_string(warps);
          }
        }
      HS_CU(cudaStreamSynchronize(s));
      const float one = 1.0f, zero = 0.0f;
      const double blas_us = time([&] {  // one GEMM over all rows (the fused q/k/v and gate/up path)
        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(total), ntok, static_cast<int>(bn.cols), &one,
                     w.p, CUDA_R_16BF, static_cast<int>(bn.cols), x.p, CUDA_R_16BF, static_cast<int>(bn.cols), &zero,
                     y.p, CUDA_R_32F, static_cast<int>(total), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      });
      std::printf("%-30s %4d %12.2f %9.1f %12.2f %9.1f  (best: %s)\n", bn.name, ntok, us,
                  static_cast<double>(wbytes) / (us * 1e3), blas_us, static_cast<double>(wbytes) / (blas_us * 1e3),
                  best.c_str());
    }
  }
  cublasDestroy(blas);
  cudaStreamDestroy(s);
}

#else
TEST(Gemm16Mma, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace hs
