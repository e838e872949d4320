// tests/ops/test_bias_op.cpp — Backend::add_bias (x[r][c] += bias[c]; qwen2's q/k/v biases).
//
// BiasOp: the CPU op against a plain loop (contiguous and strided rows, shape errors); runs on
// every machine. BiasOps: every present non-CPU backend against the CPU backend, as
// tests/ops/test_backend_ops.cpp does for the other ops: fresh random inputs each run
// (HS_TEST_SEED=<n> replays; the seed is printed with every failure), the padding of strided
// rows poisoned with NaN (an op writing outside its view shows up there), and the results must
// agree bit for bit: both backends do one f32 add per element. Skips without a CUDA device (or
// in a build without CUDA).
#include <gtest/gtest.h>

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

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "ops_test_util.h"

namespace hs {
namespace {

using ops_test::normal;
using ops_test::seed_note;
constexpr auto bias_seed = ops_test::test_seed;

// A plan of n tokens (no KV): add_bias needs none, but the decoder calls it inside a step.
struct Step {
  std::vector<int32_t> tokens, positions, seq_index;
  ForwardPlan plan;
  Step(int64_t n, ThreadPool& pool)
      : tokens(static_cast<size_t>(n), 0), positions(static_cast<size_t>(n)), seq_index(static_cast<size_t>(n), 0) {
    for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    plan.tokens = tokens;
    plan.positions = positions;
    plan.seq_index = seq_index;
    plan.pool = &pool;
    plan.seq_tokens = {static_cast<int32_t>(n)};
  }
};

// x [rows][cols] inside rows of `stride` floats (stride >= cols; the pad is NaN), bias [cols]:
// runs add_bias on `b` and returns the whole [rows][stride] buffer.
std::vector<float> run_add_bias(Backend& b, ThreadPool& pool, int64_t rows, int64_t cols, int64_t stride,
                                const std::vector<float>& x, const std::vector<float>& bias) {
  std::vector<float> host(static_cast<size_t>(rows * stride), std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(&host[static_cast<size_t>(r * stride)], &x[static_cast<size_t>(r * cols)], static_cast<size_t>(cols) * 4);
  auto buf = b.alloc(static_cast<size_t>(std::max<int64_t>(1, rows * stride)) * 4, "add_bias test x");
  EXPECT_TRUE(buf.is_ok()) << buf.status().to_string();
  if (!buf.is_ok()) return {};
  const Tensor whole = Tensor::matrix(buf->data(), DType::F32, rows, stride, b.device());
  if (!host.empty()) {
    EXPECT_TRUE(b.from_host(host.data(), whole).is_ok());
  }
  Tensor xt = Tensor::matrix(buf->data(), DType::F32, rows, cols, b.device());
  xt.row_stride = stride * 4;
  auto bt = b.prepare_vector(bias, "add_bias test bias");
  EXPECT_TRUE(bt.is_ok()) << bt.status().to_string();
  if (!bt.is_ok()) return {};
  Step step(rows, pool);
  EXPECT_TRUE(b.begin_step(step.plan).is_ok());
  const Status st = b.add_bias(xt, *bt);
  const Status end = b.end_step();
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_TRUE(end.is_ok()) << end.to_string();
  std::vector<float> out(host.size());
  if (!out.empty()) {
    EXPECT_TRUE(b.to_host(whole, out.data()).is_ok());
  }
  return out;
}

struct Shape {
  int64_t rows, cols, stride;
};
// Decode (1 row), prefill chunks, qwen2's widths (896 q, 128 k/v), odd sizes, strided views.
constexpr Shape kShapes[] = {{1, 896, 896}, {7, 128, 128}, {300, 896, 896}, {33, 1000, 1000},
                             {5, 3, 3},     {64, 128, 200}, {17, 896, 1024}, {0, 128, 128}};

// Bitwise equality with NaN = NaN (the poisoned pad must stay NaN, the view must not).
int64_t mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && std::memcmp(&got[i], &want[i], 4) != 0) ++bad;
  }
  return bad;
}

TEST(BiasOp, CpuAddsBiasToEveryRow) {
  auto cpu = make_backend(Device::kCpu);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  ThreadPool pool(1);
  std::mt19937_64 rng(bias_seed());
  for (const Shape& s : kShapes) {
    const auto x = normal(rng, static_cast<size_t>(s.rows * s.cols), 2.0f);
    const auto bias = normal(rng, static_cast<size_t>(s.cols), 0.5f);
    std::vector<float> want(static_cast<size_t>(s.rows * s.stride), std::numeric_limits<float>::quiet_NaN());
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c)
        want[static_cast<size_t>(r * s.stride + c)] = x[static_cast<size_t>(r * s.cols + c)] + bias[static_cast<size_t>(c)];
    const auto got = run_add_bias(**cpu, pool, s.rows, s.cols, s.stride, x, bias);
    EXPECT_EQ(mismatches(got, want), 0) << "[" << s.rows << "][" << s.cols << "] stride " << s.stride << "; "
                                        << seed_note();
  }
}

TEST(BiasOp, RejectsMismatchedBias) {
  auto cpu = make_backend(Device::kCpu);
  ASSERT_TRUE(cpu.is_ok());
  std::vector<float> x(4 * 8, 1.0f), bias(7, 1.0f);
  const Tensor xt = Tensor::matrix(x.data(), DType::F32, 4, 8);
  auto bt = (*cpu)->prepare_vector(bias, "bias");
  ASSERT_TRUE(bt.is_ok());
  const Status st = (*cpu)->add_bias(xt, *bt);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bias"), std::string::npos) << st.message();
  Tensor f16 = xt;
  f16.dtype = DType::F16;
  auto b8 = (*cpu)->prepare_vector(std::vector<float>(8, 1.0f), "bias");
  ASSERT_TRUE(b8.is_ok());
  EXPECT_EQ((*cpu)->add_bias(f16, *b8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(x[0], 1.0f);  // nothing written on an error
}

TEST(BiasOps, MatchesCpu) {
  auto dev = make_backend(Device::kCuda);
  if (!dev.is_ok()) GTEST_SKIP() << "no CUDA backend: " << dev.status().message();
  auto cpu = make_backend(Device::kCpu);
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  ThreadPool pool(0);
  std::mt19937_64 rng(bias_seed() ^ 0xB1A5);
  std::printf("add_bias: %s vs %s, %s\n", (*dev)->name().c_str(), (*cpu)->name().c_str(), seed_note().c_str());
  for (const Shape& s : kShapes) {
    const auto x = normal(rng, static_cast<size_t>(s.rows * s.cols), 2.0f);
    const auto bias = normal(rng, static_cast<size_t>(s.cols), 0.5f);
    const auto ref = run_add_bias(**cpu, pool, s.rows, s.cols, s.stride, x, bias);
    const auto got = run_add_bias(**dev, pool, s.rows, s.cols, s.stride, x, bias);
    const int64_t bad = mismatches(got, ref);
    std::printf("%-12s [%lld][%lld] stride %-6lld %s\n", "add_bias", static_cast<long long>(s.rows),
                static_cast<long long>(s.cols), static_cast<long long>(s.stride), bad == 0 ? "bitwise equal" : "FAIL");
    EXPECT_EQ(bad, 0) << "[" << s.rows << "][" << s.cols << "] stride " << s.stride << "; " << seed_note();
  }
  // A bias whose width differs from the rows' is refused, naming the op.
  auto xb = (*dev)->alloc(4 * 8 * 4, "x");
  ASSERT_TRUE(xb.is_ok());
  const Tensor xt = Tensor::matrix(xb->data(), DType::F32, 4, 8, Device::kCuda);
  auto bt = (*dev)->prepare_vector(std::vector<float>(7, 1.0f), "bias");
  ASSERT_TRUE(bt.is_ok());
  const Status st = (*dev)->add_bias(xt, *bt);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("add_bias"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace hs
