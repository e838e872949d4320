// tests/ops/test_gemv_quant_warp.cpp — the batch-1/2 integer-dot GEMV on quantized device rows
// (backend/cuda/gemv_quant_warp.h), called directly with cudaMalloc'd buffers (no backend).
//
// QuantWarpGemv.* run on the GPU (skip without a device) against a double-precision reference
// from hs::dequantize_row of random GGUF blocks (random bytes, random f16 scales, a few zero):
//   every output must lie within the kernel's stated error bound (gemv_quant_warp.h), computed
//   per output from the actual x: sum_c |W| 0.505 amax_b / 32767 (x quantized per 32 columns to
//   int16) + (m + 8) 2^-24 sum_c A_c (|x| + e_c) (fp32: m accumulations a lane; A_c = |W| for
//   Q4_0 / Q8_0, |d sc q| + |dmin m| for Q4_K). Shapes: rows 1, 7, 37, 4099 x cols 256, 4096,
//   14336 (4099 x 14336 replaced by 300 x 14336), Q4_0 / Q8_0 also 96 / 160 (padded groups);
//   1 and 2 tokens scaled by (1, 1e5) and (1e-5, 1); strided and unaligned x; strided y whose
//   padding must stay NaN. Every plan (rows per warp 1 / 2 / 4, 1..8 warps a CTA, PDL off / main / both)
//   is checked; plans with the same rows per warp must agree bitwise; a CUDA graph replay must
//   equal the eager launch bitwise; NaN in x poisons only its token; bad operands are refused.
// QuantWarpGemv.Bandwidth (HS_GEMV_BENCH=1 only): us and GB/s of the 8B-llama and 27B decode shapes at
//   1 and 2 tokens (per plan, eager and graph-replayed, the tensor-core launch_gemv_quant for
//   comparison) next to the measured cudaMemcpy D2D rate, weights rotated over > 256 MB so small
//   matrices come from DRAM, not L2.
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
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "ops_test_util.h"

#if defined(HS_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/gemv_quant_warp.h"
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

// [rows] GGUF rows of cols / block elements each: random quants, random f16 scales (a few zero).
std::vector<uint8_t> random_gguf(QuantKind k, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const int64_t bc = cuda::quant_block_cols(k), bb = cuda::quant_gguf_block_bytes(k);
  const int64_t n_blocks = rows * (cols / bc);
  std::vector<uint8_t> out(static_cast<size_t>(n_blocks * bb));
  for (size_t i = 0; i < out.size(); i += 8) {  // 8 random bytes a draw
    const uint64_t r = rng();
    std::memcpy(out.data() + i, &r, std::min<size_t>(8, out.size() - i));
  }
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
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

// Per element: the magnitude the fp32 terms of the kernel scale with (|W|; Q4_K |d sc q| + |dmin m|).
std::vector<float> weight_mag(QuantKind k, const std::vector<uint8_t>& gguf, const std::vector<float>& w) {
  std::vector<float> a(w.size());
  if (k != QuantKind::kQ4_K) {
    for (size_t i = 0; i < w.size(); ++i) a[i] = std::fabs(w[i]);
    return a;
  }
  const size_t n_blocks = w.size() / 256;
  for (size_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = gguf.data() + b * 144;
    uint16_t hd, hm;
    std::memcpy(&hd, blk, 2);
    std::memcpy(&hm, blk + 2, 2);
    const float d = fp16_to_fp32(hd), dmin = fp16_to_fp32(hm);
    const uint8_t* q = blk + 16;
    for (int j = 0; j < 4; ++j) {  // 64 elements: sub-blocks 2j (low nibbles), 2j + 1 (high)
      for (int h = 0; h < 2; ++h) {
        uint8_t sc, m;
        get_scale_min_k4(2 * j + h, blk + 4, &sc, &m);
        for (int l = 0; l < 32; ++l) {
          const int qv = h ? q[32 * j + l] >> 4 : q[32 * j + l] & 15;
          a[b * 256 + 64 * j + 32 * h + l] = std::fabs(d * sc * qv) + std::fabs(dmin * m);
        }
      }
    }
  }
  return a;
}

std::vector<uint8_t> repack(QuantKind k, const std::vector<uint8_t>& gguf, int64_t rows, int64_t cols,
                            int64_t row_bytes) {
  const int64_t src_row = cols / cuda::quant_block_cols(k) * cuda::quant_gguf_block_bytes(k);
  std::vector<uint8_t> dev(static_cast<size_t>(rows * row_bytes), 0xAB);
  for (int64_t r = 0; r < rows; ++r) cuda::quant_repack_row(k, gguf.data() + r * src_row, cols, dev.data() + r * row_bytes);
  return dev;
}

#define HS_CU(expr)                                                                                        \
  do {                                                                                                     \
    const cudaError_t hs_e_ = (expr);                                                                      \
    ASSERT_EQ(hs_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(hs_e_) << "; " << seed_note(); \
  } while (0)

// A repacked random matrix on the device with its host reference floats.
struct QuantWeights {
  std::vector<float> w;    // [rows][cols] reference floats (hs::dequantize_row)
  std::vector<float> mag;  // [rows][cols] weight_mag
  DevBuf dev;              // [rows][row_bytes] repacked
  int64_t rows = 0, cols = 0, row_bytes = 0;
  QuantWeights(QuantKind k, int64_t r, int64_t c, std::mt19937_64& rng)
      : dev(static_cast<size_t>(r * cuda::quant_device_row_bytes(k, c))), rows(r), cols(c) {
    row_bytes = cuda::quant_device_row_bytes(k, cols);
    const auto gguf = random_gguf(k, rows, cols, rng);
    w.resize(static_cast<size_t>(rows * cols));
    const Status st = dequantize_row(kind_dtype(k), gguf.data(), gguf.size(), w.data(), rows * cols);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    mag = weight_mag(k, gguf, w);
    const auto bytes = repack(k, gguf, rows, cols, row_bytes);
    if (dev.p) cudaMemcpy(dev.p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice);
  }
};

// Accumulations of one lane (the fp32 term of the bound): u-steps of 8 groups x terms a u-step.
int64_t lane_terms(QuantKind k, int64_t cols) {
  const cuda::QuantRowLayout l = cuda::quant_row_layout(k, cols);
  const int64_t nu = (l.groups + 7) / 8;
  return nu * (k == QuantKind::kQ4_0 ? 4 : k == QuantKind::kQ8_0 ? 2 : 5);
}

class QuantWarpGemv : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^ std::hash<std::string>{}(info->name()));
  }
  std::mt19937_64 rng_;
};

// x: [ntok][cols] N(0, 1) with 1 % outliers (x20), token t scaled by scale[t % scale.size()]
// (the scales repeat over the tokens: tests pass two and run up to kMaxQuantWarpRows tokens).
std::vector<float> make_x(std::mt19937_64& rng, int ntok, int64_t cols, std::span<const float> scale) {
  std::vector<float> x = normal(rng, static_cast<size_t>(ntok * cols), 1.0f, true);
  for (int t = 0; t < ntok; ++t) {
    const float s = scale[static_cast<size_t>(t) % scale.size()];
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(t * cols + c)] *= s;
  }
  return x;
}

struct Check {
  double worst_rel = 0;    // max |y - ref| / sum |W||x|
  double worst_bound = 0;  // max |y - ref| / bound
  int64_t bad = 0;
  std::vector<float> y;    // [ntok][y_stride] as read back
};

// Launches (x [ntok][cols] at x_stride floats, x_off floats into its buffer; y rows y_stride
// apart, NaN-filled before) and checks every output against the bound.
template <typename Launch>
Check run_check(QuantKind k, const QuantWeights& qw, const std::vector<float>& x, int ntok, int64_t x_stride,
                int64_t x_off, int64_t y_stride, Launch launch, const std::string& what) {
  Check res;
  const int64_t rows = qw.rows, cols = qw.cols;
  std::vector<float> xh(static_cast<size_t>(x_off + ntok * x_stride), 0.0f);
  for (int t = 0; t < ntok; ++t) std::copy_n(x.begin() + t * cols, cols, xh.begin() + x_off + t * x_stride);
  DevBuf dx(xh.size() * 4), dy(static_cast<size_t>(ntok * y_stride) * 4),
      ds(cuda::gemv_quant_warp_scratch_bytes(cols, ntok));
  EXPECT_TRUE(dx.p && dy.p && ds.p);
  if (!dx.p || !dy.p || !ds.p) return res;
  EXPECT_EQ(cudaMemcpy(dx.p, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dy.p, 0xFF, static_cast<size_t>(ntok * y_stride) * 4), cudaSuccess);  // NaN
  EXPECT_EQ(cudaMemset(ds.p, 0xA5, cuda::gemv_quant_warp_scratch_bytes(cols, ntok)), cudaSuccess);  // garbage
  const cuda::CRows xr{dx.as<float>() + x_off, ntok, cols, x_stride};
  const cuda::Rows yr{dy.as<float>(), ntok, rows, y_stride};
  const cudaError_t e = launch(xr, yr, ds.p);
  EXPECT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
  const cudaError_t es = cudaDeviceSynchronize();
  EXPECT_EQ(es, cudaSuccess) << what << ": " << cudaGetErrorString(es);
  if (e != cudaSuccess || es != cudaSuccess) {
    res.bad = 1;
    return res;
  }
  res.y.resize(static_cast<size_t>(ntok * y_stride));
  EXPECT_EQ(cudaMemcpy(res.y.data(), dy.p, res.y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  // Per token: the x quantization error bound e_c = 0.505 max(amax_b, 2^-100) / 32767.
  std::vector<double> xe(static_cast<size_t>(ntok * cols));
  for (int t = 0; t < ntok; ++t)
    for (int64_t b = 0; b < cols / 32; ++b) {
      double amax = 0;
      for (int c = 0; c < 32; ++c) amax = std::max(amax, std::fabs(static_cast<double>(x[t * cols + 32 * b + c])));
      amax = std::max(amax, std::ldexp(1.0, -100));
      for (int c = 0; c < 32; ++c) xe[static_cast<size_t>(t * cols + 32 * b + c)] = 0.505 * amax / 32767.0;
    }
  const double gamma = static_cast<double>(lane_terms(k, cols) + 8) * std::ldexp(1.0, -24);
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = qw.w.data() + r * cols;
    const float* ar = qw.mag.data() + r * cols;
    for (int t = 0; t < ntok; ++t) {
      const float* xt = x.data() + t * cols;
      const double* et = xe.data() + t * cols;
      double ref = 0, mag = 0, xerr = 0, fp = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double wv = wr[c], xv = xt[c];
        ref += wv * xv;
        mag += std::fabs(wv * xv);
        xerr += std::fabs(wv) * et[c];
        fp += static_cast<double>(ar[c]) * (std::fabs(xv) + et[c]);
      }
      const double bound = 1.02 * (xerr + gamma * fp) + 1e-37;
      const double got = res.y[static_cast<size_t>(t * y_stride + r)];
      const double err = std::fabs(got - ref);
      if (!(err <= bound)) {
        if (res.bad++ < 3)
          ADD_FAILURE() << what << ": y[" << t << "][" << r << "] = " << got << ", ref " << ref << " (err " << err
                        << ", bound " << bound << ", sum |wx| " << mag << "); " << seed_note();
      }
      if (std::isfinite(err)) {
        res.worst_rel = std::max(res.worst_rel, mag > 0 ? err / mag : 0.0);
        res.worst_bound = std::max(res.worst_bound, err / bound);
      }
    }
  }
  for (int t = 0; t < ntok; ++t)
    for (int64_t r = rows; r < y_stride; ++r)
      if (!std::isnan(res.y[static_cast<size_t>(t * y_stride + r)]) && res.bad++ < 3)
        ADD_FAILURE() << what << ": wrote y padding [" << t << "][" << r << "]";
  return res;
}

struct Shape {
  int64_t rows, cols;
};

std::string describe(QuantKind k, const Shape& sh, int ntok) {
  return std::string(kind_name(k)) + " " + std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " ntok " +
         std::to_string(ntok);
}

TEST_F(QuantWarpGemv, MatchesReference) {
  std::vector<Shape> shapes;
  for (int64_t rows : {1, 7, 37, 4099})
    for (int64_t cols : {256, 4096, 14336}) shapes.push_back({rows == 4099 && cols == 14336 ? 300 : rows, cols});
  shapes.push_back({5, 96});
  shapes.push_back({33, 160});
  const float scales[2][2] = {{1.0f, 1e5f}, {1e-5f, 1.0f}};
  for (QuantKind k : kKinds) {
    for (const Shape& sh : shapes) {
      if (!cuda::quant_cols_valid(k, sh.cols)) continue;
      QuantWeights qw(k, sh.rows, sh.cols, rng_);
      ASSERT_NE(qw.dev.p, nullptr);
      double worst_rel = 0, worst_bound = 0;
      for (int ntok = 1; ntok <= cuda::kMaxQuantWarpRows; ++ntok) {
        if (!cuda::quant_warp_takes(k, ntok)) continue;  // Q4_K: 1-2 tokens
        for (const auto& sc : scales) {
          const auto x = make_x(rng_, ntok, sh.cols, sc);
          const bool odd = ntok == 1 && sc[0] == 1.0f ? false : true;  // strided, unaligned x and padded y
          const int64_t xs = sh.cols + (odd ? 5 : 0), xo = odd ? 1 : 0, ys = sh.rows + (odd ? 3 : 0);
          const Check r = run_check(
              k, qw, x, ntok, xs, xo, ys,
              [&](cuda::CRows xr, cuda::Rows yr, void* scratch) {
                return cuda::launch_gemv_quant_warp(k, qw.dev.as<uint8_t>(), sh.rows, sh.cols, qw.row_bytes, xr, yr,
                                                    scratch, nullptr);
              },
              describe(k, sh, ntok) + " scale " + std::to_string(sc[0]));
          worst_rel = std::max(worst_rel, r.worst_rel);
          worst_bound = std::max(worst_bound, r.worst_bound);
        }
      }
      std::printf("quant warp gemv %-5s %5lld x %-6lld worst |err| / sum|wx| %.2e, / bound %.3f\n", kind_name(k),
                  static_cast<long long>(sh.rows), static_cast<long long>(sh.cols), worst_rel, worst_bound);
    }
  }
}

// Every plan; plans with the same rows per warp sum in the same order and must agree bitwise.
TEST_F(QuantWarpGemv, EveryPlanMatchesReference) {
  const std::vector<Shape> shapes = {{37, 4096}, {4099, 256}, {7, 14336}, {33, 160}};
  const float sc[2] = {1.0f, 1e5f};
  for (QuantKind k : kKinds) {
    for (const Shape& sh : shapes) {
      if (!cuda::quant_cols_valid(k, sh.cols)) continue;
      QuantWeights qw(k, sh.rows, sh.cols, rng_);
      ASSERT_NE(qw.dev.p, nullptr);
      for (int ntok = 1; ntok <= cuda::kMaxQuantWarpRows; ++ntok) {
        if (!cuda::quant_warp_takes(k, ntok)) continue;  // Q4_K: 1-2 tokens
        const auto x = make_x(rng_, ntok, sh.cols, sc);
        for (int rpw : {1, 2, 4}) {
          std::vector<float> first;
          for (int wpc : {1, 2, 4, 8}) {
            // pdl: none, main kernel, both kernels; 3: main kernel, compiled for 3 CTAs an SM (one
            // token, R <= 2 only).
            // 4 / 5: the software-pipelined loop (one token) at 2 / 3 CTAs an SM.
            for (int pdl = 0; pdl < 6; ++pdl) {
              if (pdl >= 3 && ntok != 1) continue;
              if ((pdl == 3 || pdl == 5) && rpw > 2) continue;
              cuda::QuantWarpPlan p;
              p.rows_per_warp = rpw;
              p.warps_per_cta = wpc;
              p.pdl = pdl >= 1;
              p.pdl_x = pdl == 2;
              p.min_ctas_per_sm = pdl == 3 || pdl == 5 ? 3 : 2;
              p.pipelined = pdl >= 4;
              const std::string what = describe(k, sh, ntok) + " plan " + std::to_string(rpw) + "/" +
                                       std::to_string(wpc) + " pdl " + std::to_string(pdl);
              const Check r = run_check(
                  k, qw, x, ntok, sh.cols, 0, sh.rows,
                  [&](cuda::CRows xr, cuda::Rows yr, void* scratch) {
                    return cuda::launch_gemv_quant_warp(k, qw.dev.as<uint8_t>(), sh.rows, sh.cols, qw.row_bytes, xr,
                                                        yr, scratch, nullptr, &p);
                  },
                  what);
              if (first.empty()) {
                first = r.y;
              } else if (r.y.size() == first.size()) {
                EXPECT_EQ(std::memcmp(r.y.data(), first.data(), first.size() * 4), 0)
                    << what << ": not bitwise equal to 1 warp a CTA without PDL";
              }
            }
          }
        }
      }
    }
  }
}

// A captured graph (three launches on different x, PDL edges inside) replays to the eager bits.
// Several weights sharing x in one launch (q / k / v): each output bitwise equal to the weight
// launched alone under the same plan (a row's sum order depends only on rows per warp), a weight
// of 0 rows skipped, strided outputs' padding untouched; the default plan (planned on the total
// rows) within the bound of the reference.
TEST_F(QuantWarpGemv, MultiWeightLaunchEqualsSingleLaunches) {
  const int64_t cols = 4096;
  const int64_t rows[] = {300, 0, 37, 64};  // launched as {300, 37, 64}, {300, 0, 37} and all four
  const float sc[2] = {1.0f, 1e5f};
  for (QuantKind k : kKinds) {
    if (!cuda::quant_cols_valid(k, cols)) continue;
    std::vector<std::unique_ptr<QuantWeights>> qw;
    for (int64_t r : rows) qw.push_back(std::make_unique<QuantWeights>(k, std::max<int64_t>(r, 1), cols, rng_));
    for (int ntok = 1; ntok <= cuda::kMaxQuantWarpRows; ++ntok) {
        if (!cuda::quant_warp_takes(k, ntok)) continue;  // Q4_K: 1-2 tokens
      const auto x = make_x(rng_, ntok, cols, sc);
      DevBuf dx(x.size() * 4), ds(cuda::gemv_quant_warp_scratch_bytes(cols, ntok));
      ASSERT_TRUE(dx.p && ds.p);
      ASSERT_EQ(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      const cuda::CRows xr{dx.as<float>(), ntok, cols, cols};
      for (int rpw : {1, 2, 4}) {
        for (const std::vector<int>& pick :
             {std::vector<int>{0, 2, 3}, std::vector<int>{0, 1, 2}, std::vector<int>{0, 1, 2, 3}}) {
          cuda::QuantWarpPlan p;
          p.rows_per_warp = rpw;
          p.warps_per_cta = 4;
          const std::string what = std::string(kind_name(k)) + " ntok " + std::to_string(ntok) + " rpw " +
                                   std::to_string(rpw) + " weights " + std::to_string(pick.size());
          std::vector<std::unique_ptr<DevBuf>> ym, ys;  // multi / single outputs, [ntok][rows + 3]
          cuda::QuantWarpOut outs[cuda::kMaxQuantWarpWeights];
          for (size_t i = 0; i < pick.size(); ++i) {
            const int64_t r = rows[pick[i]], stride = r + 3;
            ym.push_back(std::make_unique<DevBuf>(static_cast<size_t>(ntok * stride) * 4 + 4));
            ys.push_back(std::make_unique<DevBuf>(static_cast<size_t>(ntok * stride) * 4 + 4));
            ASSERT_EQ(cudaMemset(ym.back()->p, 0xFF, static_cast<size_t>(ntok * stride) * 4 + 4), cudaSuccess);
            ASSERT_EQ(cudaMemset(ys.back()->p, 0xFF, static_cast<size_t>(ntok * stride) * 4 + 4), cudaSuccess);
            outs[i] = cuda::QuantWarpOut{qw[pick[i]]->dev.as<uint8_t>(), r,
                                         cuda::Rows{ym.back()->as<float>(), ntok, r, stride}};
            if (r > 0) {
              ASSERT_EQ(cuda::launch_gemv_quant_warp(k, qw[pick[i]]->dev.as<uint8_t>(), r, cols, qw[pick[i]]->row_bytes,
                                                     xr, cuda::Rows{ys.back()->as<float>(), ntok, r, stride}, ds.p,
                                                     nullptr, &p),
                        cudaSuccess)
                  << what;
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
            }
          }
          ASSERT_EQ(cuda::launch_gemv_quant_warp_multi(k, static_cast<int>(pick.size()), outs, cols, qw[0]->row_bytes, xr,
                                                       ds.p, nullptr, &p),
                    cudaSuccess)
              << what;
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
          for (size_t i = 0; i < pick.size(); ++i) {
            const int64_t r = rows[pick[i]];
            const size_t n = static_cast<size_t>(ntok * (r + 3)) + 1;
            std::vector<uint32_t> a(n), b(n);
            ASSERT_EQ(cudaMemcpy(a.data(), ym[i]->p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
            ASSERT_EQ(cudaMemcpy(b.data(), ys[i]->p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
            EXPECT_EQ(a, b) << what << ": weight " << i << " (" << r << " rows) differs from its own launch";
            if (r > 0) {
              EXPECT_NE(a[0], 0xFFFFFFFFu) << what << ": weight " << i << " not written";
            }
          }
        }
      }
      // The default plan over the total rows: every weight within the reference bound.
      for (int i : {0, 2, 3}) {
        const int64_t r = rows[i];
        const Check c = run_check(
            k, *qw[i], x, ntok, cols, 0, r,
            [&](cuda::CRows xr2, cuda::Rows yr, void* scratch) {
              cuda::QuantWarpOut o[3] = {
                  {qw[0]->dev.as<uint8_t>(), rows[0], cuda::Rows{nullptr, 0, 0, 0}},
                  {qw[2]->dev.as<uint8_t>(), rows[2], cuda::Rows{nullptr, 0, 0, 0}},
                  {qw[3]->dev.as<uint8_t>(), rows[3], cuda::Rows{nullptr, 0, 0, 0}}};
              DevBuf other[3] = {DevBuf(static_cast<size_t>(ntok * rows[0]) * 4),
                                 DevBuf(static_cast<size_t>(ntok * rows[2]) * 4),
                                 DevBuf(static_cast<size_t>(ntok * rows[3]) * 4)};
              const int slot = i == 0 ? 0 : i == 2 ? 1 : 2;
              for (int j = 0; j < 3; ++j) o[j].y = cuda::Rows{other[j].as<float>(), ntok, o[j].rows, o[j].rows};
              o[slot].y = yr;
              const cudaError_t e = cuda::launch_gemv_quant_warp_multi(k, 3, o, cols, qw[0]->row_bytes, xr2, scratch,
                                                                       nullptr);
              const cudaError_t es = cudaDeviceSynchronize();  // before `other` is freed
              return e != cudaSuccess ? e : es;
            },
            std::string(kind_name(k)) + " multi default plan, weight " + std::to_string(i));
        EXPECT_EQ(c.bad, 0);
      }
    }
  }
}

TEST_F(QuantWarpGemv, GraphReplayEqualsEager) {
  const int64_t rows = 1031, cols = 4096;
  int dev = 0, n_sm = 0;
  HS_CU(cudaGetDevice(&dev));
  HS_CU(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
  // Two tokens under the default plan; one token software-pipelined with the quantize kernel a
  // programmatic dependent too (it rewrites the shared x scratch).
  for (QuantKind k : kKinds)
  for (int variant = 0; variant < 2; ++variant) {
    const int ntok = variant == 0 ? 2 : 1;
    QuantWeights qw(k, rows, cols, rng_);
    ASSERT_NE(qw.dev.p, nullptr);
    cuda::QuantWarpPlan plan = cuda::plan_gemv_quant_warp(k, rows, cols, ntok, n_sm);
    if (variant == 1) {
      plan.pipelined = true;
      plan.pdl_x = true;
    }
    const float sc[2] = {1.0f, 3.0f};
    DevBuf dx(static_cast<size_t>(3 * ntok * cols) * 4), dy(static_cast<size_t>(3 * ntok * rows) * 4),
        ds(cuda::gemv_quant_warp_scratch_bytes(cols, ntok));
    ASSERT_TRUE(dx.p && dy.p && ds.p);
    for (int i = 0; i < 3; ++i) {
      const auto x = make_x(rng_, ntok, cols, sc);
      HS_CU(cudaMemcpy(dx.as<float>() + i * ntok * cols, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    }
    cudaStream_t s;
    HS_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto enqueue = [&](bool sync_each = false) -> cudaError_t {
      for (int i = 0; i < 3; ++i) {
        if (sync_each && i > 0) {
          const cudaError_t e = cudaStreamSynchronize(s);
          if (e != cudaSuccess) return e;
        }
        const cuda::CRows xr{dx.as<float>() + i * ntok * cols, ntok, cols, cols};
        const cuda::Rows yr{dy.as<float>() + i * ntok * rows, ntok, rows, rows};
        const cudaError_t e =
            cuda::launch_gemv_quant_warp(k, qw.dev.as<uint8_t>(), rows, cols, qw.row_bytes, xr, yr, ds.p, s, &plan);
        if (e != cudaSuccess) return e;
      }
      return cudaSuccess;
    };
    // Serially (a sync after each launch: nothing overlaps), then eagerly (PDL overlaps), then replayed.
    std::vector<float> serial(static_cast<size_t>(3 * ntok * rows));
    HS_CU(enqueue(true));
    HS_CU(cudaStreamSynchronize(s));
    HS_CU(cudaMemcpy(serial.data(), dy.p, serial.size() * 4, cudaMemcpyDeviceToHost));
    HS_CU(cudaMemset(dy.p, 0, serial.size() * 4));
    HS_CU(enqueue());
    HS_CU(cudaStreamSynchronize(s));
    std::vector<float> eager(static_cast<size_t>(3 * ntok * rows)), replay(eager.size());
    HS_CU(cudaMemcpy(eager.data(), dy.p, eager.size() * 4, cudaMemcpyDeviceToHost));
    HS_CU(cudaMemset(dy.p, 0, eager.size() * 4));
    cudaGraph_t graph;
    HS_CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const cudaError_t ce = enqueue();
    HS_CU(cudaStreamEndCapture(s, &graph));
    HS_CU(ce);
    cudaGraphExec_t exec;
    HS_CU(cudaGraphInstantiate(&exec, graph, 0));
    HS_CU(cudaGraphLaunch(exec, s));
    HS_CU(cudaGraphLaunch(exec, s));
    HS_CU(cudaStreamSynchronize(s));
    HS_CU(cudaMemcpy(replay.data(), dy.p, replay.size() * 4, cudaMemcpyDeviceToHost));
    HS_CU(cudaStreamSynchronize(s));
    EXPECT_EQ(std::memcmp(serial.data(), eager.data(), eager.size() * 4), 0)
        << kind_name(k) << ", " << ntok << " token(s), variant " << variant
        << ": overlapped launches differ from serial ones; " << seed_note();
    EXPECT_EQ(std::memcmp(eager.data(), replay.data(), eager.size() * 4), 0)
        << kind_name(k) << ", " << ntok << " token(s), variant " << variant << "; " << seed_note();
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  }
}

// A NaN in token 0 makes all of token 0 NaN and leaves token 1 exact.
TEST_F(QuantWarpGemv, NonFiniteXPoisonsItsToken) {
  const int64_t rows = 64, cols = 512;
  for (QuantKind k : kKinds) {
    QuantWeights qw(k, rows, cols, rng_);
    const float sc[2] = {1.0f, 1.0f};
    auto x = make_x(rng_, 2, cols, sc);
    x[77] = std::numeric_limits<float>::quiet_NaN();
    DevBuf dx(x.size() * 4), dy(static_cast<size_t>(2 * rows) * 4), ds(cuda::gemv_quant_warp_scratch_bytes(cols, 2));
    ASSERT_TRUE(dx.p && dy.p && ds.p);
    HS_CU(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    const cuda::CRows xr{dx.as<float>(), 2, cols, cols};
    const cuda::Rows yr{dy.as<float>(), 2, rows, rows};
    HS_CU(cuda::launch_gemv_quant_warp(k, qw.dev.as<uint8_t>(), rows, cols, qw.row_bytes, xr, yr, ds.p, nullptr));
    std::vector<float> y(static_cast<size_t>(2 * rows));
    HS_CU(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(std::isnan(y[static_cast<size_t>(r)])) << kind_name(k) << " row " << r;
      EXPECT_TRUE(std::isfinite(y[static_cast<size_t>(rows + r)])) << kind_name(k) << " row " << r;
    }
  }
}

TEST_F(QuantWarpGemv, RefusesBadOperands) {
  DevBuf buf(1 << 20), scratch(1 << 20);
  ASSERT_TRUE(buf.p && scratch.p);
  uint8_t* w = buf.as<uint8_t>();
  float* f = buf.as<float>();
  const QuantKind k = QuantKind::kQ4_0;
  const int64_t rb = cuda::quant_device_row_bytes(k, 256);
  const cuda::CRows x1{f, 1, 256, 256};
  const cuda::Rows y1{f, 1, 4, 4};
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x1, y1, scratch.p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const cuda::CRows x9{f, 9, 256, 256};  // more rows than kMaxQuantWarpRows
  const cuda::Rows y9{f, 9, 4, 4};
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x9, y9, scratch.p, nullptr), cudaErrorInvalidValue);
  const cuda::CRows x3{f, 3, 256, 256};  // Q4_K takes 1-2 rows
  const cuda::Rows y3{f, 3, 4, 4};
  const int64_t rbk = cuda::quant_device_row_bytes(QuantKind::kQ4_K, 256);
  EXPECT_EQ(cuda::launch_gemv_quant_warp(QuantKind::kQ4_K, w, 4, 256, rbk, x3, y3, scratch.p, nullptr),
            cudaErrorInvalidValue);
  const cuda::CRows x100{f, 1, 100, 100};
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 100, rb, x100, y1, scratch.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_gemv_quant_warp(QuantKind::kQ4_K, w, 4, 128, 160, cuda::CRows{f, 1, 128, 128}, y1,
                                         scratch.p, nullptr),
            cudaErrorInvalidValue);  // Q4_K needs 256-column super-blocks
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb - 16, x1, y1, scratch.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb + 8, x1, y1, scratch.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w + 8, 4, 256, rb, x1, y1, scratch.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x1, y1, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x1, y1, scratch.as<uint8_t>() + 4, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x1, cuda::Rows{f, 1, 5, 5}, scratch.p, nullptr),
            cudaErrorInvalidValue);  // y.cols != rows
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x1, cuda::Rows{f, 2, 4, 4}, scratch.p, nullptr),
            cudaErrorInvalidValue);  // y.rows != x.rows
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, cuda::CRows{f, 1, 256, 200}, y1, scratch.p, nullptr),
            cudaErrorInvalidValue);  // x stride < cols
  cuda::QuantWarpPlan bad;
  bad.rows_per_warp = 3;
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x1, y1, scratch.p, nullptr, &bad), cudaErrorInvalidValue);
  bad.rows_per_warp = 2;
  bad.warps_per_cta = 16;
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x1, y1, scratch.p, nullptr, &bad), cudaErrorInvalidValue);
  bad.warps_per_cta = 4;
  bad.rows_per_warp = 4;
  bad.min_ctas_per_sm = 3;  // 3 CTAs an SM: R <= 2 only
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x1, y1, scratch.p, nullptr, &bad), cudaErrorInvalidValue);
  bad.rows_per_warp = 2;
  bad.min_ctas_per_sm = 4;  // 2 or 3 CTAs an SM only
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 4, 256, rb, x1, y1, scratch.p, nullptr, &bad), cudaErrorInvalidValue);
  bad = cuda::QuantWarpPlan{};
  // Empty shapes launch nothing.
  EXPECT_EQ(cuda::launch_gemv_quant_warp(k, w, 0, 256, rb, x1, cuda::Rows{f, 1, 0, 0}, scratch.p, nullptr),
            cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cuda::gemv_quant_warp_scratch_bytes(4096, 2) % 256, 0u);
  EXPECT_GE(cuda::gemv_quant_warp_scratch_bytes(14336, 2), cuda::gemv_quant_warp_scratch_bytes(14336, 1));
}

// ---- bandwidth (HS_GEMV_BENCH=1 only) ------------------------------------------------------------

// Median of 9 timings of `reps` calls of f (after a warm-up), us per call.
template <typename F>
double time_us(cudaStream_t s, int reps, F f) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  f(0);
  cudaStreamSynchronize(s);
  std::vector<double> v;
  for (int rep = 0; rep < 9; ++rep) {
    cudaEventRecord(e0, s);
    for (int i = 0; i < reps; ++i) f(i);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    v.push_back(1e3 * ms / reps);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST_F(QuantWarpGemv, Bandwidth) {
  const char* env = std::getenv("HS_GEMV_BENCH");
  if (!env || std::string(env) != "1") GTEST_SKIP() << "set HS_GEMV_BENCH=1";
  cudaStream_t s;
  HS_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int dev = 0, n_sm = 0;
  HS_CU(cudaGetDevice(&dev));
  HS_CU(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
  {  // the copy rate: 1 GiB D2D, read + written bytes / time
    const size_t n = size_t{1} << 30;
    DevBuf a(n), b(n);
    ASSERT_TRUE(a.p && b.p);
    HS_CU(cudaMemset(a.p, 1, n));
    const double us = time_us(s, 3, [&](int) { cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice, s); });
    std::printf("cudaMemcpy D2D 1 GiB: %.1f us, %.1f GB/s (read + write), %.1f GB/s (read)\n", us,
                2.0 * static_cast<double>(n) / (us * 1e3), static_cast<double>(n) / (us * 1e3));
  }
  // The 8B-llama decode shapes, then the Qwen3.5-27B shape's (gate + up, down, a linear layer's
  // qkv + z, its out projection).
  const std::vector<Shape> shapes = {{4096, 4096},  {1024, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096},
                                     {34816, 5120}, {5120, 17408}, {16384, 5120}, {5120, 6144}};
  constexpr int64_t kMaxCols = 17408;
  const size_t kRotate = size_t{256} << 20;  // weights cycled over >= 256 MB: each call reads DRAM
  DevBuf x(static_cast<size_t>(2 * kMaxCols) * 4), y(static_cast<size_t>(2 * 128256) * 4),
      scratch(cuda::gemv_quant_warp_scratch_bytes(kMaxCols, 2));
  ASSERT_TRUE(x.p && y.p && scratch.p);
  {
    const auto xv = normal(rng_, 2 * kMaxCols);
    HS_CU(cudaMemcpy(x.p, xv.data(), xv.size() * 4, cudaMemcpyHostToDevice));
  }
  std::printf("%-5s %-13s %4s  %-12s %9s %9s %9s %9s %9s\n", "w", "shape", "ntok", "plan(R/W)", "us", "GB/s",
              "graph us", "GB/s", "mma us");
  double layer_us[2] = {0, 0}, head_us[2] = {0, 0};  // Q4_0: one 8B layer's 7 matrices, the lm head
  for (QuantKind k : kKinds) {
    for (const Shape& sh : shapes) {
      const int64_t rb = cuda::quant_device_row_bytes(k, sh.cols);
      const size_t bytes = static_cast<size_t>(sh.rows * rb);
      const int copies = static_cast<int>(std::max<size_t>(1, (kRotate + bytes - 1) / bytes));
      DevBuf w(bytes * copies);
      ASSERT_NE(w.p, nullptr);
      HS_CU(cudaMemset(w.p, 0x11, bytes * copies));
      for (int ntok = 1; ntok <= cuda::kMaxQuantWarpRows; ++ntok) {
        if (!cuda::quant_warp_takes(k, ntok)) continue;  // Q4_K: 1-2 tokens
        const cuda::CRows xr{x.as<float>(), ntok, sh.cols, sh.cols};
        const cuda::Rows yr{y.as<float>(), ntok, sh.rows, sh.rows};
        const cuda::QuantWarpPlan ap = cuda::plan_gemv_quant_warp(k, sh.rows, sh.cols, ntok, n_sm);
        std::vector<cuda::QuantWarpPlan> plans = {ap};
        for (int r : {1, 2, 4})
          if (r != ap.rows_per_warp) {
            cuda::QuantWarpPlan p = ap;
            p.rows_per_warp = r;
            if (r > 2) p.min_ctas_per_sm = 2;  // 3 CTAs an SM take R <= 2
            const int64_t warps = (sh.rows + r - 1) / r;  // the planner's CTA rule for this R
            p.warps_per_cta = 8;
            while (p.warps_per_cta > 2 && (warps + p.warps_per_cta - 1) / p.warps_per_cta < 8 * n_sm) p.warps_per_cta /= 2;
            plans.push_back(p);
          }
        for (int wpc : {2, 8})
          if (wpc != ap.warps_per_cta) {
            cuda::QuantWarpPlan p = ap;
            p.warps_per_cta = wpc;
            plans.push_back(p);
          }
        cuda::QuantWarpPlan nopdl = ap;
        nopdl.pdl = false;
        plans.push_back(nopdl);
        cuda::QuantWarpPlan pdlx = ap;
        pdlx.pdl_x = true;
        plans.push_back(pdlx);
        if (ntok == 1) {  // the other main loop (plain / software-pipelined)
          cuda::QuantWarpPlan pipe = ap;
          pipe.pipelined = !ap.pipelined;
          plans.push_back(pipe);
          if (ap.min_ctas_per_sm == 3) {  // pipelined at 2 CTAs an SM: 16 warps, twice the loads a lane
            pipe.pipelined = true;
            pipe.min_ctas_per_sm = 2;
            plans.push_back(pipe);
          }
        }
        const double mma_us = time_us(s, 20, [&](int i) {
          cuda::launch_gemv_quant(k, w.as<uint8_t>() + (i % copies) * bytes, sh.rows, sh.cols, rb, xr, yr, s);
        });
        for (size_t pi = 0; pi < plans.size(); ++pi) {
          const cuda::QuantWarpPlan& p = plans[pi];
          auto call = [&](int i) {
            return cuda::launch_gemv_quant_warp(k, w.as<uint8_t>() + (i % copies) * bytes, sh.rows, sh.cols, rb, xr,
                                                yr, scratch.p, s, &p);
          };
          HS_CU(call(0));
          HS_CU(cudaStreamSynchronize(s));
          const double us = time_us(s, 20, [&](int i) { call(i); });
          // Graph of 20 calls (PDL edges; no launch overhead), replayed.
          cudaGraph_t g;
          cudaGraphExec_t ge;
          HS_CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          for (int i = 0; i < 20; ++i) call(i);
          HS_CU(cudaStreamEndCapture(s, &g));
          HS_CU(cudaGraphInstantiate(&ge, g, 0));
          const double gus = time_us(s, 1, [&](int) { cudaGraphLaunch(ge, s); }) / 20.0;
          cudaGraphExecDestroy(ge);
          cudaGraphDestroy(g);
          const std::string shape = std::to_string(sh.rows) + "x" + std::to_string(sh.cols);
          const std::string plan = std::to_string(p.rows_per_warp) + "/" + std::to_string(p.warps_per_cta) +
                                   (p.pdl ? "" : " nopdl") + (p.pdl_x ? " pdlx" : "") + (p.pipelined ? " pipe" : "") + (p.min_ctas_per_sm == 3 ? " c3" : "") +
                                   (pi == 0 ? " *" : "");
          std::printf("%-5s %-13s %4d  %-12s %9.2f %9.1f %9.2f %9.1f %9.2f\n", kind_name(k), shape.c_str(), ntok,
                      plan.c_str(), us, static_cast<double>(bytes) / (us * 1e3), gus,
                      static_cast<double>(bytes) / (gus * 1e3), pi == 0 ? mma_us : 0.0);
          if (pi == 0 && k == QuantKind::kQ4_0 && (sh.cols == 4096 || sh.cols == 14336)) {
            const int mult = sh.rows == 14336 ? 2 : sh.rows == 4096 && sh.cols == 4096 ? 2 : sh.rows == 1024 ? 2 : 1;
            if (sh.rows == 128256)
              head_us[ntok - 1] = gus;
            else
              layer_us[ntok - 1] += mult * gus;
          }
        }
      }
    }
  }
  for (int t = 0; t < 2; ++t)
    std::printf("Q4_0 8B decode, %d token(s): GEMVs of one layer %.1f us (graph), x 32 + lm head %.1f us = %.3f ms a "
                "step: <= %.0f steps/s from the GEMVs alone\n",
                t + 1, layer_us[t], head_us[t], (32 * layer_us[t] + head_us[t]) * 1e-3,
                1e6 / (32 * layer_us[t] + head_us[t]));
  cudaStreamDestroy(s);
}

#else  // !HS_WITH_CUDA

TEST(QuantWarpGemv, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace hs
