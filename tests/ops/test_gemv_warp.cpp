// tests/ops/test_gemv_warp.cpp — the batch-1/2 GEMV of 16-bit weights (launch_gemv16_warp_multi /
// launch_gemv16_warp, backend/cuda/gemv_warp.cu) and the vectorized RMSNorm (launch_rms_norm,
// backend/cuda/elementwise.cu), called directly with cudaMalloc'd buffers (no backend).
//
// GemvWarp.*: on the GPU (skips without a device), against a double-precision reference of the
// exact f16 / bf16 weight values:
//   |y - ref| <= 1e-5 * sum_c |W[r][c]| |x[t][c]| per output (fp32 FMAs on exact weights: ~1e-7
//   expected); 1..3 weights of different row counts (0 rows included) in one launch, odd rows,
//   cols from 8 (one chunk) to 61440 (x past shared memory: the L1 path), padded weight rows,
//   1 / 2 tokens with a padded x stride, strided y whose padding must stay NaN.
//   Every cut (rows per warp 1 / 2, x through shared memory or L1, 3 CTAs: many rounds per
//   warp, PDL) and the one-weight launch_gemv16_warp give the same bits as the default launch.
// GemvWarp.Bandwidth (HS_GEMV_BENCH=1 only): weight-read rate of the 8B-llama decode shapes and of
//   the q/k/v and gate/up multi launches, each cut, next to a cudaMemcpy D2D rate measured here.
// RmsNormKernel.*: launch_rms_norm against the host's arithmetic (double sum of squares, then the
//   same float products): equal but for a rare last-bit flip of inv from the double sum's order
//   (<= 4e-7 relative);
//   in place, no weight, unaligned rows (the scalar path); HS_GEMV_BENCH=1 times it.
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
#include <vector>

#include "core/fp16.h"
#include "ops_test_util.h"

#if defined(HS_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/kernels.h"
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

class GemvWarp : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^ std::hash<std::string>{}(info->name()));
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);  // blocking: ordered with the cudaMemcpy / cudaMemset calls
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  std::mt19937_64 rng_;
  cudaStream_t stream_ = nullptr;  // PDL launches go on a created stream, not the legacy one
};

// One weight on the device: [rows][stride] bits (stride >= cols, a multiple of 8), and its values.
struct Weight {
  int64_t rows = 0, cols = 0, stride = 0;
  std::vector<float> val;  // [rows][cols], the exact values of the bits
  std::unique_ptr<DevBuf> dev;
};

Weight make_weight(bool bf16, int64_t rows, int64_t cols, int64_t pad, std::mt19937_64& rng) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.stride = cols + pad;
  const std::vector<float> v = normal(rng, static_cast<size_t>(rows * cols), 0.5f, true);
  std::vector<uint16_t> bits(static_cast<size_t>(rows * w.stride), 0x7e00);  // padding: NaN bits (never read)
  w.val.resize(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const uint16_t b = bf16 ? fp32_to_bf16(v[i]) : fp32_to_fp16(v[i]);
      bits[static_cast<size_t>(r * w.stride + c)] = b;
      w.val[i] = bf16 ? bf16_to_fp32(b) : fp16_to_fp32(b);
    }
  w.dev = std::make_unique<DevBuf>(bits.size() * 2);
  if (w.dev->p) cudaMemcpy(w.dev->p, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice);
  return w;
}

// A multi launch over `ws` with x [ntok][cols] (x_stride floats apart) into fresh NaN-filled y
// buffers ([ntok][rows + y_pad] each); returns the y buffers (host copies, with padding).
struct MultiRun {
  cudaError_t launch = cudaSuccess, sync = cudaSuccess;
  std::vector<std::vector<float>> y;
};

MultiRun run_multi(cudaStream_t s, bool bf16, const std::vector<Weight*>& ws, const DevBuf& dx, int ntok, int64_t cols,
                   int64_t x_stride, int64_t y_pad, const cuda::GemvWarpConfig* cfg, bool single = false) {
  MultiRun out;
  const int n = static_cast<int>(ws.size());
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
  const cuda::CRows xr{dx.as<float>(), ntok, cols, x_stride};
  if (single) {
    for (int i = 0; i < n && out.launch == cudaSuccess; ++i)
      out.launch = cuda::launch_gemv16_warp(bf16, wp[static_cast<size_t>(i)], rows[static_cast<size_t>(i)], cols,
                                            strides[static_cast<size_t>(i)], xr, yr[static_cast<size_t>(i)], s);
  } else {
    out.launch = cuda::launch_gemv16_warp_multi(bf16, n, wp.data(), rows.data(), cols, strides.data(), xr, yr.data(), s,
                                                cfg);
  }
  out.sync = cudaDeviceSynchronize();
  for (int i = 0; i < n; ++i) {
    std::vector<float> h(static_cast<size_t>(ntok * yr[static_cast<size_t>(i)].stride));
    cudaMemcpy(h.data(), dy[static_cast<size_t>(i)]->p, h.size() * 4, cudaMemcpyDeviceToHost);
    out.y.push_back(std::move(h));
  }
  return out;
}

struct MultiCase {
  std::vector<int64_t> rows;
  int64_t cols;
};

TEST_F(GemvWarp, MultiMatchesReference) {
  const std::vector<MultiCase> cases = {
      {{37}, 96},           {{64, 17, 1}, 8},     {{5, 0, 7}, 200},      {{129, 33, 2}, 1000},
      {{4096, 1024, 1024}, 4096}, {{300, 301}, 14336}, {{3, 2}, 61440}, {{1, 4099}, 4104},
  };
  for (bool bf16 : {false, true}) {
    for (const MultiCase& mc : cases) {
      const int64_t cols = mc.cols;
      std::vector<Weight> wv;
      for (size_t i = 0; i < mc.rows.size(); ++i) wv.push_back(make_weight(bf16, mc.rows[i], cols, i == 1 ? 8 : 0, rng_));
      std::vector<Weight*> ws;
      for (auto& w : wv) {
        ASSERT_NE(w.dev->p, nullptr);
        ws.push_back(&w);
      }
      for (int ntok : {1, 2}) {
        const int64_t x_stride = cols + (ntok == 2 ? 4 : 0), y_pad = ntok == 2 ? 3 : 0;
        const std::vector<float> x = normal(rng_, static_cast<size_t>(ntok * cols), 1.0f, true);
        std::vector<float> xh(static_cast<size_t>(ntok * x_stride), 0.0f);
        for (int t = 0; t < ntok; ++t) std::copy_n(x.begin() + t * cols, cols, xh.begin() + t * x_stride);
        DevBuf dx(xh.size() * 4);
        ASSERT_NE(dx.p, nullptr);
        HS_CU(cudaMemcpy(dx.p, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
        std::string what = std::string(bf16 ? "bf16" : "f16") + " cols " + std::to_string(cols) + " rows";
        for (int64_t r : mc.rows) what += " " + std::to_string(r);
        what += " ntok " + std::to_string(ntok);

        const MultiRun ref_run = run_multi(stream_, bf16, ws, dx, ntok, cols, x_stride, y_pad, nullptr);
        ASSERT_EQ(ref_run.launch, cudaSuccess) << what << ": " << cudaGetErrorString(ref_run.launch);
        ASSERT_EQ(ref_run.sync, cudaSuccess) << what << ": " << cudaGetErrorString(ref_run.sync);
        double worst = 0;
        int64_t bad = 0;
        for (size_t i = 0; i < ws.size(); ++i) {
          const Weight& w = *ws[i];
          const int64_t ys = w.rows + y_pad;
          const std::vector<float>& y = ref_run.y[i];
          for (int64_t r = 0; r < w.rows; ++r)
            for (int t = 0; t < ntok; ++t) {
              double ref = 0, mag = 0;
              const float* wr = w.val.data() + r * cols;
              const float* xt = x.data() + t * cols;
              for (int64_t c = 0; c < cols; ++c) {
                ref += static_cast<double>(wr[c]) * xt[c];
                mag += std::fabs(static_cast<double>(wr[c]) * xt[c]);
              }
              const double got = y[static_cast<size_t>(t * ys + r)];
              const double err = std::fabs(got - ref) / std::max(mag, 1e-300);
              if (!(err <= 1e-5) && bad++ < 3)
                ADD_FAILURE() << what << ": weight " << i << " y[" << t << "][" << r << "] = " << got << ", ref " << ref
                              << " (sum |wx| " << mag << ", rel " << err << "); " << seed_note();
              if (std::isfinite(err)) worst = std::max(worst, err);
            }
          for (int t = 0; t < ntok; ++t)
            for (int64_t r = w.rows; r < ys; ++r)
              if (!std::isnan(y[static_cast<size_t>(t * ys + r)]) && bad++ < 3)
                ADD_FAILURE() << what << ": weight " << i << " wrote y padding [" << t << "][" << r << "]";
        }
        std::printf("%s: worst |y - ref| / sum |wx| %.2e\n", what.c_str(), worst);

        // Every cut, and the one-weight launcher, give the default launch's bits.
        struct Cut {
          const char* name;
          cuda::GemvWarpConfig cfg;
          bool single;
        };
        const size_t x_bytes = static_cast<size_t>(ntok) * ((cols / 8 + 31) / 32) * 256 * 4;
        std::vector<Cut> cuts = {
            {"rows per warp 1", {1, -1, 0, false}, false}, {"rows per warp 2", {2, -1, 0, false}, false},
            {"x through L1", {0, 0, 0, false}, false},     {"3 CTAs", {0, -1, 3, false}, false},
            {"3 CTAs, 1 row, L1", {1, 0, 3, false}, false}, {"PDL", {0, -1, 0, true}, false},
            {"launch_gemv16_warp per weight", {}, true},
        };
        if (x_bytes <= 200 * 1024) cuts.push_back({"x in shared memory, 2 CTAs", {2, 1, 2, false}, false});
        for (const Cut& cut : cuts) {
          const MultiRun run = run_multi(stream_, bf16, ws, dx, ntok, cols, x_stride, y_pad, &cut.cfg, cut.single);
          ASSERT_EQ(run.launch, cudaSuccess) << what << " " << cut.name << ": " << cudaGetErrorString(run.launch);
          ASSERT_EQ(run.sync, cudaSuccess) << what << " " << cut.name << ": " << cudaGetErrorString(run.sync);
          for (size_t i = 0; i < ws.size(); ++i) {
            const std::vector<float>& a = ref_run.y[i];
            const std::vector<float>& b = run.y[i];
            size_t diff = 0;
            for (size_t k = 0; k < a.size(); ++k)
              if (std::memcmp(&a[k], &b[k], 4) != 0) ++diff;
            EXPECT_EQ(diff, 0u) << what << ": " << cut.name << " differs from the default cut in " << diff
                                << " values of weight " << i << "; " << seed_note();
          }
        }
      }
    }
  }
}

TEST_F(GemvWarp, RejectsWhatItCannotRun) {
  DevBuf w(4096 * 2), x(64 * 4), y(64 * 4);
  ASSERT_TRUE(w.p && x.p && y.p);
  const uint16_t* wp[4] = {w.as<uint16_t>(), w.as<uint16_t>(), w.as<uint16_t>(), w.as<uint16_t>()};
  int64_t rows[4] = {4, 4, 4, 4}, strides[4] = {16, 16, 16, 16};
  const cuda::Rows yr1{y.as<float>(), 1, 4, 4};
  const cuda::Rows ys[4] = {yr1, yr1, yr1, yr1};
  const cuda::CRows x1{x.as<float>(), 1, 16, 16};
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 4, wp, rows, 16, strides, x1, ys, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 0, wp, rows, 16, strides, x1, ys, nullptr), cudaErrorInvalidValue);
  const cuda::CRows x3{x.as<float>(), 3, 16, 16};
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 1, wp, rows, 16, strides, x3, ys, nullptr), cudaErrorInvalidValue);
  const cuda::CRows xu{x.as<float>() + 1, 1, 16, 16};  // unaligned x
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 1, wp, rows, 16, strides, xu, ys, nullptr), cudaErrorInvalidValue);
  const cuda::CRows x12{x.as<float>(), 1, 12, 12};  // cols not a multiple of 8
  const cuda::Rows y12[1] = {cuda::Rows{y.as<float>(), 1, 4, 4}};
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 1, wp, rows, 12, strides, x12, y12, nullptr), cudaErrorInvalidValue);
  int64_t bad_stride[1] = {12};
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 1, wp, rows, 16, bad_stride, x1, ys, nullptr), cudaErrorInvalidValue);
  const uint16_t* wu[1] = {w.as<uint16_t>() + 1};  // unaligned weight
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 1, wu, rows, 16, strides, x1, ys, nullptr), cudaErrorInvalidValue);
  const cuda::Rows ybad[1] = {cuda::Rows{y.as<float>(), 1, 5, 5}};  // y.cols != rows
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 1, wp, rows, 16, strides, x1, ybad, nullptr), cudaErrorInvalidValue);
  const cuda::GemvWarpConfig smem_cfg{0, 1, 0, false};  // x in shared memory that cannot hold it
  const cuda::CRows xbig{x.as<float>(), 1, int64_t{1} << 20, int64_t{1} << 20};
  const int64_t big_stride[1] = {int64_t{1} << 20};
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 1, wp, rows, int64_t{1} << 20, big_stride, xbig, ys, nullptr, &smem_cfg),
            cudaErrorInvalidValue);
  int64_t zero_rows[1] = {0};
  const cuda::Rows y0[1] = {cuda::Rows{y.as<float>(), 1, 0, 0}};
  EXPECT_EQ(cuda::launch_gemv16_warp_multi(true, 1, wp, zero_rows, 16, strides, x1, y0, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---- device: bandwidth (HS_GEMV_BENCH=1 only) ------------------------------------------------

// Per-launch time of `launch` (median of 15 x 10 back-to-back launches after a warm-up), in us.
// launch(i) must read the i-th copy of its weights (copies rotate so that their total exceeds L2:
// every launch streams from HBM, as the decode's distinct layers do).
template <typename Launch>
float time_us(Launch launch, cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, bool* ok) {
  *ok = launch(0) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
  if (!*ok) return 0;
  std::vector<float> us;
  int k = 0;
  for (int rep = 0; rep < 15; ++rep) {
    cudaEventRecord(e0, s);
    for (int i = 0; i < 10; ++i) *ok = *ok && launch(++k) == cudaSuccess;
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    us.push_back(ms * 100.0f);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

TEST_F(GemvWarp, Bandwidth) {
  const char* env = std::getenv("HS_GEMV_BENCH");
  if (!env || std::string(env) != "1") GTEST_SKIP() << "set HS_GEMV_BENCH=1";
  cudaEvent_t e0, e1;
  HS_CU(cudaEventCreate(&e0));
  HS_CU(cudaEventCreate(&e1));
  // The copy rate, as CudaBackend::measure_peaks counts it: read + write bytes of a 1 GiB copy.
  double copy_gbs = 0;
  {
    const size_t bytes = size_t{1} << 30;
    DevBuf a(bytes), b(bytes);
    ASSERT_TRUE(a.p && b.p);
    HS_CU(cudaMemset(a.p, 1, bytes));
    HS_CU(cudaMemcpy(b.p, a.p, bytes, cudaMemcpyDeviceToDevice));
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
      HS_CU(cudaEventRecord(e0, stream_));
      HS_CU(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, stream_));
      HS_CU(cudaEventRecord(e1, stream_));
      HS_CU(cudaEventSynchronize(e1));
      float ms = 0;
      HS_CU(cudaEventElapsedTime(&ms, e0, e1));
      best = std::min(best, ms);
    }
    copy_gbs = 2.0 * static_cast<double>(bytes) / (best * 1e6);
    std::printf("cudaMemcpy D2D 1 GiB: %.3f ms, %.1f GB/s (read + write)\n", best, copy_gbs);
  }
  DevBuf x(static_cast<size_t>(2 * 14336) * 4), y(static_cast<size_t>(2 * 3 * 128256) * 4);
  ASSERT_TRUE(x.p && y.p);
  {
    const auto xv = normal(rng_, 2 * 14336);
    HS_CU(cudaMemcpy(x.p, xv.data(), xv.size() * 4, cudaMemcpyHostToDevice));
  }
  struct Bench {
    const char* name;
    std::vector<int64_t> rows;
    int64_t cols;
  };
  const std::vector<Bench> benches = {
      {"o 4096x4096", {4096}, 4096},
      {"k 1024x4096", {1024}, 4096},
      {"q/k/v multi", {4096, 1024, 1024}, 4096},
      {"gate 14336x4096", {14336}, 4096},
      {"gate/up multi", {14336, 14336}, 4096},
      {"down 4096x14336", {4096}, 14336},
      {"out 128256x4096", {128256}, 4096},
  };
  struct Cut {
    const char* name;
    cuda::GemvWarpConfig cfg;
    bool separate;  // one launch_gemv16_warp per weight (multi benches only)
  };
  const std::vector<Cut> cuts = {{"default", {}, false},
                                 {"pdl", {0, -1, 0, true}, false},
                                 {"rpw1", {1, -1, 0, false}, false},
                                 {"rpw2", {2, -1, 0, false}, false},
                                 {"x via L1", {0, 0, 0, false}, false},
                                 {"separate", {}, true}};
  std::printf("%-18s %4s %-9s %9s %9s %7s\n", "weights (bf16)", "ntok", "cut", "us", "GB/s", "copy%");
  for (const Bench& bn : benches) {
    int64_t all_rows = 0;
    for (int64_t r : bn.rows) all_rows += r;
    const size_t bytes = static_cast<size_t>(all_rows * bn.cols) * 2;
    const int copies = static_cast<int>(std::max<size_t>(1, (size_t{512} << 20) / bytes + 1));  // > 512 MiB in all
    DevBuf w(bytes * static_cast<size_t>(copies));
    ASSERT_NE(w.p, nullptr);
    HS_CU(cudaMemset(w.p, 0x11, bytes * static_cast<size_t>(copies)));
    for (int ntok : {1, 2}) {
      for (const Cut& cut : cuts) {
        if (cut.separate && bn.rows.size() == 1) continue;
        std::vector<cuda::Rows> yr;
        std::vector<int64_t> strides;
        int64_t off = 0;
        for (int64_t r : bn.rows) {
          yr.push_back(cuda::Rows{y.as<float>() + off, ntok, r, r});
          off += ntok * r;
          strides.push_back(bn.cols);
        }
        const cuda::CRows xr{x.as<float>(), ntok, bn.cols, bn.cols};
        auto launch = [&](int k) {
          const uint16_t* base = w.as<uint16_t>() + static_cast<size_t>(k % copies) * (bytes / 2);
          const uint16_t* wp[3];
          int64_t o = 0;
          for (size_t i = 0; i < bn.rows.size(); ++i) {
            wp[i] = base + o;
            o += bn.rows[i] * bn.cols;
          }
          if (cut.separate) {
            cudaError_t e = cudaSuccess;
            for (size_t i = 0; i < bn.rows.size() && e == cudaSuccess; ++i)
              e = cuda::launch_gemv16_warp(true, wp[i], bn.rows[i], bn.cols, bn.cols, xr, yr[i], stream_);
            return e;
          }
          return cuda::launch_gemv16_warp_multi(true, static_cast<int>(bn.rows.size()), wp, bn.rows.data(), bn.cols,
                                                strides.data(), xr, yr.data(), stream_, &cut.cfg);
        };
        bool ok = false;
        const float t = time_us(launch, stream_, e0, e1, &ok);
        ASSERT_TRUE(ok) << bn.name << " " << cut.name;
        const double gbs = static_cast<double>(bytes) / (t * 1e3);
        std::printf("%-18s %4d %-9s %9.2f %9.1f %6.1f%%\n", bn.name, ntok, cut.name, t, gbs, 100.0 * gbs / copy_gbs);
      }
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

// ---- RMSNorm ---------------------------------------------------------------------------------

class RmsNormKernel : public GemvWarp {};

// The host's arithmetic (backend/cpu/ops.cpp): double sum of squares, inv = float(1 / sqrt(mean + eps)),
// out = float(float(x * inv) * w).
std::vector<float> rms_ref(const std::vector<float>& x, int64_t rows, int64_t cols, const float* w, float eps) {
  std::vector<float> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(cols) + static_cast<double>(eps)));
    for (int64_t c = 0; c < cols; ++c) {
      const float a = xr[c] * inv;
      out[static_cast<size_t>(r * cols + c)] = w ? a * w[c] : a;
    }
  }
  return out;
}

TEST_F(RmsNormKernel, MatchesHost) {
  struct Case {
    int64_t rows, cols;
    int variant;  // 0: weight, 1: no weight, 2: weight, in place, 3: weight, unaligned rows (x offset by 1 float)
  };
  std::vector<Case> cases;
  for (int64_t cols : {4, 64, 576, 640, 2048, 4096, 5120, 8192, 16384, 16388, 100})
    for (int64_t rows : {1, 3, 8, 300})
      for (int v = 0; v < 4; ++v) cases.push_back({rows, cols, v});
  for (const Case& cs : cases) {
    const int64_t n = cs.rows * cs.cols;
    const std::vector<float> x = normal(rng_, static_cast<size_t>(n), 3.0f, true);
    const std::vector<float> w = normal(rng_, static_cast<size_t>(cs.cols), 1.0f);
    const int64_t off = cs.variant == 3 ? 1 : 0;
    DevBuf dx(static_cast<size_t>(n + off) * 4), dout(static_cast<size_t>(n) * 4), dw(w.size() * 4);
    ASSERT_TRUE(dx.p && dout.p && dw.p);
    HS_CU(cudaMemcpy(dx.as<float>() + off, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    HS_CU(cudaMemcpy(dw.p, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
    const float* wp = cs.variant == 1 ? nullptr : dw.as<float>();
    const cuda::CRows xr{dx.as<float>() + off, cs.rows, cs.cols, cs.cols};
    const cuda::Rows outr = cs.variant == 2 ? cuda::Rows{dx.as<float>(), cs.rows, cs.cols, cs.cols}
                                            : cuda::Rows{dout.as<float>(), cs.rows, cs.cols, cs.cols};
    HS_CU(cuda::launch_rms_norm(xr, wp, 1e-6f, outr, stream_));
    HS_CU(cudaDeviceSynchronize());
    std::vector<float> got(static_cast<size_t>(n));
    HS_CU(cudaMemcpy(got.data(), outr.p, got.size() * 4, cudaMemcpyDeviceToHost));
    const std::vector<float> ref = rms_ref(x, cs.rows, cs.cols, cs.variant == 1 ? nullptr : w.data(), 1e-6f);
    int64_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!(std::fabs(got[i] - ref[i]) <= 4e-7 * std::fabs(ref[i])) && bad++ < 3)
        ADD_FAILURE() << cs.rows << "x" << cs.cols << " variant " << cs.variant << ": out[" << i << "] = " << got[i]
                      << ", host " << ref[i] << "; " << seed_note();
    }
  }
}

TEST_F(RmsNormKernel, Bench) {
  const char* env = std::getenv("HS_GEMV_BENCH");
  if (!env || std::string(env) != "1") GTEST_SKIP() << "set HS_GEMV_BENCH=1";
  cudaEvent_t e0, e1;
  HS_CU(cudaEventCreate(&e0));
  HS_CU(cudaEventCreate(&e1));
  const int64_t cols = 4096;
  DevBuf x(static_cast<size_t>(8192 * cols) * 4), out(static_cast<size_t>(8192 * cols) * 4), w(cols * 4);
  ASSERT_TRUE(x.p && out.p && w.p);
  HS_CU(cudaMemset(x.p, 0x3f, static_cast<size_t>(8192 * cols) * 4));
  HS_CU(cudaMemset(w.p, 0x3f, cols * 4));
  for (int64_t rows : {1, 2, 8, 64, 8192}) {
    auto launch = [&](int) {
      return cuda::launch_rms_norm(cuda::CRows{x.as<float>(), rows, cols, cols}, w.as<float>(), 1e-6f,
                                   cuda::Rows{out.as<float>(), rows, cols, cols}, stream_);
    };
    bool ok = false;
    const float t = time_us(launch, stream_, e0, e1, &ok);
    ASSERT_TRUE(ok);
    std::printf("rms_norm %5lld x %lld: %8.2f us  %8.1f GB/s (read + write)\n", static_cast<long long>(rows),
                static_cast<long long>(cols), t, 2.0 * static_cast<double>(rows * cols * 4) / (t * 1e3));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

#else  // !HS_WITH_CUDA

TEST(GemvWarp, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace hs
