// tests/unit/backend/test_matmul.cpp — backend/cpu/matmul.h against a double-precision
// reference, for every weight type, every SIMD level this CPU has, and awkward shapes;
// get_rows against dequantize_row; error paths.
//
// Inputs are fresh each run: the seed comes from std::random_device (or HS_TEST_SEED) and
// is printed with every failure. Weights are random bytes with sane fp16 scales, so every
// quant bit pattern occurs (including Q8_0's -128, which ggml's quantizer never emits).
//
// Both activation precisions are checked (kInt8: one 8-bit term; kInt8x2: 8-bit value plus
// 8-bit residual, whose bound below is 127x tighter).
//
// Error bound (per output, not statistical): the reference is sum_i w_i * x_i in double
// with w_i = dequantize_row(W) (exact floats). The kernels replace x_i by its 8-bit
// quantization q_i * da (da = max|x| / 127 over the activation block of 32, or 256 for
// K-quants), which is off by at most da / 2, while all integer dot products are exact. So
//     |y - ref| <= sum_i |w_i| * da(i) / 2  +  fp32 rounding slack,
// where the slack (2e-5 relative, with headroom for the scale/min decomposition whose
// partial terms can exceed the result) covers the per-block fp32 scaling and summation.
// In relative terms this is ~amax/(254 mean|x|) of sum |w x|, i.e. within the "~1e-2" of
// 8-bit activations; the test also checks max|y - ref| / max sum|w x| < 0.01 for Gaussian
// activations. Float weights (F32/F16/BF16) are checked against fp32 summation error only:
// (n/4 + 16) * 2^-24 * sum |w x|, the bound for 4+ independent fp32 accumulators.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace hs::cpu {
namespace {

uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("HS_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 10));
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

std::string seed_note() {
  return "seed " + std::to_string(test_seed()) + " (rerun with HS_TEST_SEED=" +
         std::to_string(test_seed()) + ")";
}

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,
                        DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                        DType::Q4_K, DType::Q5_K, DType::Q6_K};

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool is_k(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

void put_half(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Random weight bytes [n_out][row_bytes] of `type`, with fp16 scales in a sane range.
std::vector<uint8_t> random_weights(DType type, int64_t n_in, int64_t n_out, std::mt19937_64& rng) {
  const int64_t row_bytes = weight_row_bytes(type, n_in);
  std::vector<uint8_t> w(static_cast<size_t>(row_bytes * n_out));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> sym(-1.0f, 1.0f), pos(0.001f, 0.02f);
  const auto info = *dtype_info(type);
  const int64_t n_elems = n_in * n_out;
  if (type == DType::F32) {
    for (int64_t i = 0; i < n_elems; ++i) {
      const float v = sym(rng);
      std::memcpy(&w[static_cast<size_t>(4 * i)], &v, 4);
    }
    return w;
  }
  if (type == DType::F16 || type == DType::BF16) {
    for (int64_t i = 0; i < n_elems; ++i) {
      const float v = sym(rng);
      const uint16_t h = type == DType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
      std::memcpy(&w[static_cast<size_t>(2 * i)], &h, 2);
    }
    return w;
  }
  for (int64_t blk = 0; blk < n_elems / info.block_elems; ++blk) {
    uint8_t* p = &w[static_cast<size_t>(blk * info.block_bytes)];
    switch (type) {
      case DType::Q4_0: case DType::Q5_0: case DType::Q8_0:
        put_half(p, sym(rng) * 0.05f);
        break;
      case DType::Q4_1: case DType::Q5_1:
        put_half(p, pos(rng) * 3.0f);
        put_half(p + 2, sym(rng) * 0.5f);
        break;
      case DType::Q4_K: case DType::Q5_K:
        put_half(p, pos(rng) * 0.2f);      // d (x 6-bit scale)
        put_half(p + 2, pos(rng) * 0.2f);  // dmin (x 6-bit min)
        break;
      case DType::Q6_K:
        put_half(p + offsetof(BlockQ6K, d), pos(rng) * 0.1f);
        break;
      default:
        break;
    }
  }
  return w;
}

std::vector<float> random_acts(int64_t n, std::mt19937_64& rng, bool outliers = true) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) {
    v = nd(rng);
    if (outliers && u(rng) < 0.01f) v *= 20.0f;  // occasional outliers, as real activations have
  }
  return x;
}

std::vector<float> dequantize_all(DType type, const std::vector<uint8_t>& w, int64_t n_in, int64_t n_out) {
  std::vector<float> out(static_cast<size_t>(n_in * n_out));  // [n_out][n_in]
  const int64_t rb = weight_row_bytes(type, n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    const Status st = dequantize_row(type, w.data() + o * rb, static_cast<size_t>(rb),
                                     out.data() + o * n_in, n_in);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
  }
  return out;
}

struct Case {
  DType type;
  int64_t n_in, n_out, n_tokens;
};

// Runs one case at one level and checks every output against its bound.
void check_case(const Case& c, SimdLevel level, ActPrecision prec, ThreadPool& pool,
                std::mt19937_64& rng, bool outliers) {
  SCOPED_TRACE(std::string(dtype_name(c.type)) + " level=" + simd_level_name(level) +
               " precision=" + act_precision_name(prec) +
               " n_in=" + std::to_string(c.n_in) + " n_out=" + std::to_string(c.n_out) +
               " n_tokens=" + std::to_string(c.n_tokens) + " threads=" +
               std::to_string(pool.n_threads()) + (outliers ? " outliers " : " ") + seed_note());
  const auto wbytes = random_weights(c.type, c.n_in, c.n_out, rng);
  const auto x = random_acts(c.n_tokens * c.n_in, rng, outliers);  // [n_tokens][n_in]
  const auto wf = dequantize_all(c.type, wbytes, c.n_in, c.n_out);
  std::vector<float> y(static_cast<size_t>(c.n_tokens * c.n_out), NAN);  // [n_tokens][n_out]
  const WeightView w{c.type, c.n_in, c.n_out, wbytes.data()};
  const Status st = matmul_at(level, w, x.data(), c.n_tokens, y.data(), pool, prec);
  ASSERT_TRUE(st.is_ok()) << st.to_string();

  const int act_block = is_k(c.type) ? 256 : 32;
  double max_err = 0.0, max_l1 = 0.0;
  int bad = 0;
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    const float* xt = x.data() + t * c.n_in;
    std::vector<double> half_step(static_cast<size_t>(c.n_in));  // [n_in] da / 2 of i's block
    for (int64_t b0 = 0; b0 < c.n_in; b0 += act_block) {
      double amax = 0.0;
      for (int64_t i = b0; i < b0 + act_block && i < c.n_in; ++i) amax = std::max(amax, std::fabs(double(xt[i])));
      for (int64_t i = b0; i < b0 + act_block && i < c.n_in; ++i) half_step[i] = amax / 127.0 / 2.0;
    }
    for (int64_t o = 0; o < c.n_out; ++o) {
      const float* wo = wf.data() + o * c.n_in;
      double ref = 0.0, abs_wx = 0.0, abs_x = 0.0, quant_bound = 0.0, max_w = 0.0;
      for (int64_t i = 0; i < c.n_in; ++i) {
        ref += double(wo[i]) * double(xt[i]);
        abs_wx += std::fabs(double(wo[i]) * double(xt[i]));
        abs_x += std::fabs(double(xt[i]));
        max_w = std::max(max_w, std::fabs(double(wo[i])));
        quant_bound += std::fabs(double(wo[i])) * half_step[i];
      }
      double bound;
      if (is_float(c.type)) {
        bound = (double(c.n_in) / 4.0 + 16.0) * std::ldexp(1.0, -24) * abs_wx + 1e-30;
      } else {
        // kInt8x2: the residual is at most da/2, so its own step is <= da/254 and the
        // second term leaves <= da/508 per element.
        const double q = prec == ActPrecision::kInt8x2 ? quant_bound / 127.0 : quant_bound;
        bound = q * 1.01 + 2e-5 * (abs_wx + 4.0 * max_w * abs_x) + 1e-30;
      }
      const double got = y[static_cast<size_t>(t * c.n_out + o)];
      const double err = std::fabs(got - ref);
      max_err = std::max(max_err, err);
      max_l1 = std::max(max_l1, abs_wx);
      if (!(err <= bound) && bad++ < 5) {
        ADD_FAILURE() << "y[" << t << "][" << o << "] = " << got << ", reference " << ref
                      << ", |error| " << err << " > bound " << bound;
      }
    }
  }
  // A normalized metric on top: max error over the largest l1 magnitude sum |w x| of an
  // output. (max|ref| is a poor denominator on random data: a dot product of random signs
  // is ~sqrt(n) smaller than its l1 magnitude and sometimes near 0.) For Gaussian
  // activations the per-output bound gives ~amax/(254 mean|x|) < 1%; a 20-sigma outlier
  // widens its block's step ~7x, so with outliers only the per-output bound applies.
  if (!is_float(c.type) && !outliers) {
    const double limit = prec == ActPrecision::kInt8x2 ? 1e-3 : 0.01;
    EXPECT_LT(max_err / (max_l1 + 1e-30), limit) << "max|y-ref| " << max_err << " max sum|wx| " << max_l1;
  }
}

std::vector<SimdLevel> available_levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512})
    if (simd_level_available(l)) out.push_back(l);
  return out;
}

std::vector<int64_t> n_in_choices(DType t) {
  if (is_float(t)) return {1, 7, 33, 64, 100, 576};
  if (is_k(t)) return {256, 512, 768, 2048};
  return {32, 64, 96, 544, 576, 1024};  // 1, 2, 3, 17, 18, 32 blocks: pair and group tails
}

class MatmulTypes : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTypes, MatchesDoubleReferenceAtEveryLevel) {
  const DType type = GetParam();
  std::mt19937_64 rng(test_seed() ^ static_cast<uint64_t>(type) * 0x9e3779b97f4a7c15ull);
  ThreadPool pool1(1), pool3(3);  // 3 threads on 2 cores also exercises a preempted worker
  for (SimdLevel level : available_levels()) {
    for (ActPrecision prec : {ActPrecision::kInt8, ActPrecision::kInt8x2}) {
      for (int64_t n_in : n_in_choices(type)) {
        for (int64_t n_out : {1, 7, 33}) {
          for (int64_t n_tokens : {1, 3, 17}) {
            check_case({type, n_in, n_out, n_tokens}, level, prec, n_tokens == 3 ? pool1 : pool3,
                       rng, /*outliers=*/n_out == 7);
          }
        }
      }
      // Larger: several row chunks and token chunks per thread (prefill path).
      const int64_t big_in = is_k(type) ? 1024 : 576;
      check_case({type, big_in, 130, 70}, level, prec, pool3, rng, false);
      check_case({type, big_in, 515, 2}, level, prec, pool3, rng, true);
      if (HasFailure()) return;
    }
  }
}

TEST_P(MatmulTypes, LevelsAgreeClosely) {
  // All levels quantize activations identically and compute exact integer dots, so they
  // differ only by fp32 rounding order.
  const DType type = GetParam();
  std::mt19937_64 rng(test_seed() + 17 * static_cast<uint64_t>(type));
  const int64_t n_in = is_k(type) ? 768 : 544, n_out = 37, n_tokens = 5;
  const auto wbytes = random_weights(type, n_in, n_out, rng);
  const auto x = random_acts(n_tokens * n_in, rng);
  const WeightView w{type, n_in, n_out, wbytes.data()};
  ThreadPool pool(2);
  for (ActPrecision prec : {ActPrecision::kInt8, ActPrecision::kInt8x2}) {
    std::vector<float> ref(static_cast<size_t>(n_tokens * n_out));
    ASSERT_TRUE(matmul_at(SimdLevel::kScalar, w, x.data(), n_tokens, ref.data(), pool, prec).is_ok());
    float scale = 0.0f;
    for (float v : ref) scale = std::max(scale, std::fabs(v));
    for (SimdLevel level : available_levels()) {
      std::vector<float> y(ref.size());
      ASSERT_TRUE(matmul_at(level, w, x.data(), n_tokens, y.data(), pool, prec).is_ok());
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], ref[i], 1e-4f * scale)
            << simd_level_name(level) << " " << act_precision_name(prec) << " i=" << i << " " << seed_note();
    }
  }
}

TEST_P(MatmulTypes, GetRowsIsBitwiseDequantize) {
  const DType type = GetParam();
  std::mt19937_64 rng(test_seed() + 31 * static_cast<uint64_t>(type));
  const int64_t n_in = is_k(type) ? 512 : (is_float(type) ? 100 : 96), n_out = 9;
  const auto wbytes = random_weights(type, n_in, n_out, rng);
  const auto wf = dequantize_all(type, wbytes, n_in, n_out);
  const std::vector<int32_t> ids = {3, 0, 8, 3, 5};
  std::vector<float> out(ids.size() * static_cast<size_t>(n_in));  // [n_ids][n_in]
  ASSERT_TRUE(get_rows({type, n_in, n_out, wbytes.data()}, ids.data(),
                       static_cast<int64_t>(ids.size()), out.data()).is_ok());
  for (size_t t = 0; t < ids.size(); ++t)
    ASSERT_EQ(0, std::memcmp(&out[t * n_in], &wf[static_cast<size_t>(ids[t] * n_in)],
                             static_cast<size_t>(n_in) * sizeof(float)))
        << "row " << t << " " << seed_note();
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTypes, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

TEST(Matmul, MultiEqualsSeparateCalls) {
  // Weights of all three activation formats sharing one input, decode and prefill sizes.
  std::mt19937_64 rng(test_seed() + 99);
  ThreadPool pool(2);
  const int64_t n_in = 512;
  const DType types[] = {DType::Q4_K, DType::Q8_0, DType::F16, DType::Q5_0};
  const int64_t n_outs[] = {33, 64, 7, 130};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<WeightView> ws;
  for (int i = 0; i < 4; ++i) bytes.push_back(random_weights(types[i], n_in, n_outs[i], rng));
  for (int i = 0; i < 4; ++i) ws.push_back({types[i], n_in, n_outs[i], bytes[i].data()});
  for (int64_t n_tokens : {1, 3, 70}) {
    const auto x = random_acts(n_tokens * n_in, rng);
    std::vector<std::vector<float>> multi(4), single(4);
    std::vector<float*> ys;
    for (int i = 0; i < 4; ++i) {
      multi[i].assign(static_cast<size_t>(n_tokens * n_outs[i]), NAN);
      single[i].assign(multi[i].size(), NAN);
      ys.push_back(multi[i].data());
      ASSERT_TRUE(matmul(ws[i], x.data(), n_tokens, single[i].data(), pool).is_ok());
    }
    ASSERT_TRUE(matmul_multi(ws, x.data(), n_tokens, ys, pool).is_ok());
    for (int i = 0; i < 4; ++i)
      ASSERT_EQ(0, std::memcmp(multi[i].data(), single[i].data(), multi[i].size() * sizeof(float)))
          << "weight " << i << " n_tokens " << n_tokens << " " << seed_note();
  }
  // Mismatched n_in / counts are errors.
  std::vector<float> y(1024);
  const std::vector<float> x(1024);
  WeightView other = ws[0];
  other.n_in = 256;
  const WeightView pair[] = {ws[0], other};
  float* const outs[] = {y.data(), y.data()};
  EXPECT_EQ(matmul_multi(pair, x.data(), 1, outs, pool).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(matmul_multi(std::span<const WeightView>(pair, 1), x.data(), 1, outs, pool).code(),
            StatusCode::kInvalidArgument);
}

TEST(Matmul, ErrorsNameTheProblem) {
  ThreadPool pool(1);
  std::vector<uint8_t> data(4096);
  std::vector<float> x(512), y(64);
  for (DType t : {DType::Q2_K, DType::Q8_K, DType::I32, DType::Q8_1}) {
    const Status st = matmul({t, 256, 2, data.data()}, x.data(), 1, y.data(), pool);
    EXPECT_EQ(st.code(), StatusCode::kUnsupported);
    EXPECT_NE(st.message().find(std::string(dtype_name(t))), std::string::npos) << st.message();
    const int32_t id = 0;
    EXPECT_EQ(get_rows({t, 256, 2, data.data()}, &id, 1, y.data()).code(), StatusCode::kUnsupported);
  }
  EXPECT_EQ(matmul({static_cast<DType>(99), 32, 1, data.data()}, x.data(), 1, y.data(), pool).code(),
            StatusCode::kUnsupported);
  const Status bad_shape = matmul({DType::Q4_K, 300, 2, data.data()}, x.data(), 1, y.data(), pool);
  EXPECT_EQ(bad_shape.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_shape.message().find("Q4_K"), std::string::npos) << bad_shape.message();
  EXPECT_EQ(matmul({DType::Q8_0, 32, 1, nullptr}, x.data(), 1, y.data(), pool).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(matmul({DType::Q8_0, 32, 1, data.data()}, x.data(), -1, y.data(), pool).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(matmul({DType::Q8_0, 32, 1, data.data()}, nullptr, 0, nullptr, pool).is_ok());
  const int32_t bad_ids[] = {0, 2};
  EXPECT_EQ(get_rows({DType::Q8_0, 32, 2, data.data()}, bad_ids, 2, y.data()).code(),
            StatusCode::kInvalidArgument);
  const int32_t neg = -1;
  EXPECT_EQ(get_rows({DType::F32, 4, 2, data.data()}, &neg, 1, y.data()).code(),
            StatusCode::kInvalidArgument);
}

TEST(Matmul, SimdLevelIsReported) {
  const std::string level = simd_level();
  EXPECT_TRUE(level == "avx512" || level == "avx2" || level == "scalar") << level;
  EXPECT_TRUE(simd_level_available(active_simd_level()));
  EXPECT_TRUE(simd_level_available(SimdLevel::kScalar));
  if (simd_level_available(SimdLevel::kAvx512)) {
    EXPECT_TRUE(simd_level_available(SimdLevel::kAvx2));
  }
}

// ------------------------------------------------------------------ thread pool

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int n_threads : {1, 2, 3, 8}) {
    ThreadPool pool(n_threads);
    EXPECT_EQ(pool.n_threads(), n_threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 100003}) {
      for (int64_t chunk : {0, 1, 3, 64, 1 << 20}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> bad_thread{0};
        pool.parallel_for(n, chunk, [&](int64_t b, int64_t e, int t) {
          if (t < 0 || t >= n_threads) bad_thread.fetch_add(1);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
        });
        EXPECT_EQ(bad_thread.load(), 0);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
              << "i=" << i << " n=" << n << " chunk=" << chunk << " threads=" << n_threads;
      }
    }
  }
}

TEST(ThreadPool, ManyDispatchesInARow) {
  ThreadPool pool(2);
  std::vector<int64_t> sums(static_cast<size_t>(pool.n_threads()), 0);
  int64_t expect = 0;
  for (int rep = 0; rep < 20000; ++rep) {
    const int64_t n = 1 + rep % 37;
    expect += n * (n - 1) / 2;
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int t) {
      for (int64_t i = b; i < e; ++i) sums[static_cast<size_t>(t)] += i;  // per-thread slot
    });
    if (rep % 5000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let workers sleep
  }
  int64_t total = 0;
  for (int64_t s : sums) total += s;
  EXPECT_EQ(total, expect);
}

TEST(ThreadPool, NestedCallsRunSeriallyConcurrentCallersTakeTurns) {
  ThreadPool pool(2);
  std::atomic<int64_t> inner{0};
  pool.parallel_for(8, 1, [&](int64_t, int64_t, int) {
    pool.parallel_for(10, [&](int64_t b, int64_t e, int) { inner.fetch_add(e - b); });
  });
  EXPECT_EQ(inner.load(), 80);
  std::atomic<int64_t> total{0};
  auto hammer = [&] {
    for (int i = 0; i < 2000; ++i)
      pool.parallel_for(16, 2, [&](int64_t b, int64_t e, int) { total.fetch_add(e - b); });
  };
  std::thread a(hammer), b(hammer);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 2000 * 16);
}

TEST(ThreadPool, DefaultUsesHardwareConcurrency) {
  ThreadPool pool;
  EXPECT_EQ(pool.n_threads(), std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  int64_t n = 0;
  pool.parallel_for(0, [&](int64_t, int64_t, int) { ++n; });
  EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace hs::cpu
