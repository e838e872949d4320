// tests/ops/test_backend_ops.cpp — every op of every present non-CPU backend against the CPU
// backend (the reference), llama.cpp test-backend-ops style.
//
// Inputs are fresh each run (std::random_device, or HS_TEST_SEED=<n> to replay; the seed is
// printed with every failure). Outputs are poisoned with NaN before each op, so an output
// the op fails to write shows up. Thresholds by what the backend is allowed to differ in:
//   16-bit weights (CUDA uploads GGUF block types and F16 as f16, F32 / BF16 as bf16, and
//   rounds matmul inputs to the weight's dtype):
//     embedding rows within 2^-8 relative per element, matmul within 1e-2 relative norm;
//   Q4_0 / Q8_0 / Q4_K (kept quantized on CUDA) and F16 / BF16 weights through the GEMV kernels
//   (quantized 1..4 rows, 16-bit 1..2): within 1e-5 relative norm (float rounding only); quantized
//   weights on the dp2a warp GEMV (Q4_0 / Q8_0 at 1-4 rows, Q4_K at 1-2; x quantized to int16 per
//   32 columns): 5e-4; quantized weights at 5+ rows (the tensor-core quantized GEMM: f16 weights
//   and x, as the cuBLAS path): 1e-2;
//   f32 element-wise math (norms, RoPE with double angles, gates, softcap): 1e-5 of max|ref|;
//   attention over f16 / bf16 / f32 / fp8 / int8 / int4 KV (both backends round K/V identically;
//   scaled pages are byte-identical, checked by ScaledKvWriteMatchesHostBytes): 2e-3; prompts over bf16 KV
//   (CUDA's flash kernel rounds Q and P to bf16): 1.5e-2.
// A compact table (op, shape, max abs error, relative error) goes to stdout for the GPU
// check log. Without a CUDA device (or a build without CUDA) every test skips, except
// BackendOpsFp8.EncoderMatchesCudaConversion (CUDA builds: the host encoder against
// cuda_fp8.h's own conversion, no device needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "kv/kv_quant.h"
#include "ops_test_util.h"

// Activation rows of Q4_0 / Q8_0 matmuls the CUDA backend runs on its dp2a warp GEMV (x as int16:
// the looser tolerance); from kGemmQuantRows on, quantized matmuls take the tensor-core quantized
// GEMM (weights and x as f16, as the cuBLAS path: 1e-2); backend/cuda/cuda_backend.h
// gemm_quant_min_rows_.
constexpr int64_t kWarpGemvRows = 4;
constexpr int64_t kGemmQuantRows = 5;

#if defined(HS_WITH_CUDA)
#include <cuda_fp8.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#endif

namespace hs {
namespace {

using ops_test::normal;
using ops_test::seed_note;
using ops_test::test_seed;

#define HS_ASSERT_OK(expr)                                                        \
  do {                                                                            \
    const ::hs::Status hs_st_ = (expr);                                           \
    ASSERT_TRUE(hs_st_.is_ok()) << #expr << ": " << hs_st_.to_string() << "; " << seed_note(); \
  } while (0)

// ---- comparison and the printed table ----------------------------------------------------

struct Diff {
  double max_abs = 0;   // max |got - ref|
  double max_ref = 0;   // max |ref|
  double rel = 0;       // ||got - ref|| / ||ref||
  int64_t bad = 0;      // non-finite outputs where the reference is finite
};

Diff compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Diff d;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], g = got[i];
    if (std::isfinite(r) && !std::isfinite(g)) {
      ++d.bad;
      continue;
    }
    const double e = std::fabs(g - r);
    d.max_abs = std::max(d.max_abs, e);
    d.max_ref = std::max(d.max_ref, std::fabs(r));
    num += e * e;
    den += r * r;
  }
  d.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return d;
}

void print_header() {
  static bool printed = false;
  if (printed) return;
  printed = true;
  std::printf("%-12s %-46s %12s %12s %10s\n", "op", "shape", "max_abs_err", "rel_err", "tol");
}

// Checks rel (norm-relative) and max_abs / max_ref against `tol`, prints one table row.
void check(const char* op, const std::string& shape, const std::vector<float>& got, const std::vector<float>& ref,
           double tol, double max_tol = -1) {
  ASSERT_EQ(got.size(), ref.size());
  const Diff d = compare(got, ref);
  const double max_rel = d.max_ref > 0 ? d.max_abs / d.max_ref : d.max_abs;
  if (max_tol < 0) max_tol = tol;
  const bool ok = d.bad == 0 && d.rel <= tol && max_rel <= max_tol;
  print_header();
  std::printf("%-12s %-46s %12.3e %12.3e %10.1e%s\n", op, shape.c_str(), d.max_abs, d.rel, tol, ok ? "" : "  FAIL");
  EXPECT_EQ(d.bad, 0) << op << " " << shape << ": unwritten / non-finite outputs; " << seed_note();
  EXPECT_LE(d.rel, tol) << op << " " << shape << "; " << seed_note();
  EXPECT_LE(max_rel, max_tol) << op << " " << shape << " (max abs " << d.max_abs << " of max " << d.max_ref << "); "
                              << seed_note();
}

// ---- tensors on a backend ------------------------------------------------------------------

struct Mat {
  Buffer buf;
  Tensor t;
};

Mat make_mat(Backend& b, int64_t rows, int64_t cols) {
  Mat m;
  auto r = b.alloc(static_cast<size_t>(std::max<int64_t>(1, rows * cols)) * 4, "test tensor");
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return m;
  m.buf = std::move(*r);
  m.t = Tensor::matrix(m.buf.data(), DType::F32, rows, cols, b.device());
  return m;
}

void upload(Backend& b, const Mat& m, const std::vector<float>& v) {
  ASSERT_EQ(static_cast<int64_t>(v.size()), m.t.rows * m.t.cols);
  HS_ASSERT_OK(b.from_host(v.data(), m.t));
}

void poison(Backend& b, const Mat& m) {
  upload(b, m, std::vector<float>(static_cast<size_t>(m.t.rows * m.t.cols), std::numeric_limits<float>::quiet_NaN()));
}

std::vector<float> download(Backend& b, const Mat& m) {
  std::vector<float> v(static_cast<size_t>(m.t.rows * m.t.cols));
  const Status st = b.to_host(m.t, v.data());
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return v;
}

// Random GGUF weight bytes [rows][row_bytes] of `type`, scales in a sane range (every quant
// bit pattern occurs; fp16 scale fields are finite by construction).
std::vector<uint8_t> random_weight(DType type, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const int64_t row_bytes = tensor_row_bytes(type, cols);
  std::vector<uint8_t> w(static_cast<size_t>(row_bytes * rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> sym(-1.0f, 1.0f), pos(0.001f, 0.02f);
  auto put_half = [](uint8_t* p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
  };
  const int64_t n = rows * cols;
  if (type == DType::F32) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = sym(rng);
      std::memcpy(&w[static_cast<size_t>(4 * i)], &v, 4);
    }
    return w;
  }
  if (type == DType::F16 || type == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = type == DType::F16 ? fp32_to_fp16(sym(rng)) : fp32_to_bf16(sym(rng));
      std::memcpy(&w[static_cast<size_t>(2 * i)], &h, 2);
    }
    return w;
  }
  const auto info = *dtype_info(type);
  for (int64_t blk = 0; blk < n / info.block_elems; ++blk) {
    uint8_t* p = &w[static_cast<size_t>(blk * info.block_bytes)];
    switch (type) {
      case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: put_half(p, sym(rng) * 0.05f); break;
      case DType::Q4_1: case DType::Q5_1:
        put_half(p, pos(rng) * 3.0f);
        put_half(p + 2, sym(rng) * 0.5f);
        break;
      case DType::Q4_K: case DType::Q5_K:
        put_half(p, pos(rng) * 0.2f);
        put_half(p + 2, pos(rng) * 0.2f);
        break;
      case DType::Q6_K: put_half(p + offsetof(BlockQ6K, d), pos(rng) * 0.1f); break;
      default: break;
    }
  }
  return w;
}

// ---- plans -----------------------------------------------------------------------------------

// A step over tokens of the given sequences; owns every array the plan's spans point into.
struct Step {
  std::vector<int32_t> tokens, positions, seq_index;
  std::vector<SeqKv*> seqs;
  ForwardPlan plan;

  void finish(KvCache* kv, ThreadPool& pool, std::vector<int32_t> logit_rows = {}) {
    if (tokens.empty()) tokens.assign(positions.size(), 0);
    plan.tokens = tokens;
    plan.positions = positions;
    plan.seq_index = seq_index;
    plan.seqs = seqs;
    plan.kv = kv;
    plan.pool = &pool;
    plan.seq_tokens.assign(seqs.size(), 0);
    for (int32_t s : seq_index) ++plan.seq_tokens[static_cast<size_t>(s)];
    plan.logit_rows = std::move(logit_rows);
    plan.max_kv_len = 0;
    for (int32_t p : positions) plan.max_kv_len = std::max(plan.max_kv_len, p + 1);
    plan.page_indptr.assign(1, 0);
    plan.page_indices.clear();
    for (SeqKv* s : seqs) {
      plan.page_indices.insert(plan.page_indices.end(), s->blocks.begin(), s->blocks.end());
      plan.page_indptr.push_back(static_cast<int32_t>(plan.page_indices.size()));
    }
  }
};

// ---- the fixture -------------------------------------------------------------------------------

class BackendOps : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dev = make_backend(Device::kCuda);
    if (!dev.is_ok()) GTEST_SKIP() << "no CUDA backend: " << dev.status().message();
    dev_ = std::move(*dev);
    auto cpu = make_backend(Device::kCpu);
    ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
    cpu_ = std::move(*cpu);
    cpu_->set_matmul_precision(MatmulPrecision::kExact);  // the float reference
    pool_ = std::make_unique<ThreadPool>(0);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^ std::hash<std::string>{}(info->name()));
    static bool announced = false;
    if (!announced) {
      announced = true;
      std::printf("backend ops: %s vs %s, %s\n", dev_->name().c_str(), cpu_->name().c_str(), seed_note().c_str());
    }
  }
  void TearDown() override {
    // Buffers must die before their backend.
    cpu_.reset();
    dev_.reset();
  }

  // An element-wise / row op on fresh tensors of both backends: `ins` are uploaded, `outs`
  // (shapes) poisoned, `op` runs inside a step of `plan`; returns each backend's outputs.
  template <typename Op>
  void run_both(const ForwardPlan& plan, const std::vector<std::pair<std::vector<int64_t>, std::vector<float>>>& ins,
                const std::vector<std::vector<int64_t>>& outs, Op op, std::vector<std::vector<float>>& ref,
                std::vector<std::vector<float>>& got) {
    for (int which = 0; which < 2; ++which) {
      Backend& b = which == 0 ? *cpu_ : *dev_;
      std::vector<Mat> in_m, out_m;
      for (const auto& [shape, data] : ins) {
        in_m.push_back(make_mat(b, shape[0], shape[1]));
        upload(b, in_m.back(), data);
      }
      for (const auto& shape : outs) {
        out_m.push_back(make_mat(b, shape[0], shape[1]));
        poison(b, out_m.back());
      }
      HS_ASSERT_OK(b.begin_step(plan));
      std::vector<Tensor> it, ot;
      for (auto& m : in_m) it.push_back(m.t);
      for (auto& m : out_m) ot.push_back(m.t);
      const Status st = op(b, it, ot);
      const Status end = b.end_step();
      HS_ASSERT_OK(st);
      HS_ASSERT_OK(end);
      auto& dst = which == 0 ? ref : got;
      dst.clear();
      for (auto& m : out_m) dst.push_back(download(b, m));
      for (auto& m : in_m) dst.push_back(download(b, m));  // in-place ops write their inputs
    }
  }

  // Sequences a and b given 40 and 70 tokens of kv's pages (shuffled, so pages scatter) and
  // `step` planned over them for the (position, sequence) tokens.
  void two_sequence_step(KvCache& kv, SeqKv& a, SeqKv& b, std::span<const std::pair<int32_t, int32_t>> tokens,
                         Step& step) {
    HS_ASSERT_OK(kv.reserve(a, 40));
    HS_ASSERT_OK(kv.reserve(b, 70));
    std::shuffle(a.blocks.begin(), a.blocks.end(), rng_);
    std::shuffle(b.blocks.begin(), b.blocks.end(), rng_);
    for (const auto& [p, sq] : tokens) {
      step.positions.push_back(p);
      step.seq_index.push_back(sq);
    }
    step.seqs = {&a, &b};
    step.finish(&kv, *pool_);
  }

  // A plan of n tokens at `positions` (no KV).
  Step simple_step(std::vector<int32_t> positions, std::vector<int32_t> logit_rows = {}) {
    Step s;
    s.positions = std::move(positions);
    s.finish(nullptr, *pool_, std::move(logit_rows));
    return s;
  }

  // A norm weight on both backends (the CPU's view and the device's copy).
  void prepare_both(const std::vector<float>& w, Tensor (&out)[2]) {
    for (int which = 0; which < 2; ++which) {
      auto r = (which == 0 ? *cpu_ : *dev_).prepare_vector(w, "norm.weight");
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      out[which] = *r;
    }
  }

  // Host weights stay alive for the whole test: prepare_weight may cache by host address.
  const std::vector<uint8_t>& keep(std::vector<uint8_t> bytes) {
    kept_.push_back(std::move(bytes));
    return kept_.back();
  }

  std::unique_ptr<Backend> cpu_, dev_;
  std::unique_ptr<ThreadPool> pool_;
  std::mt19937_64 rng_;
  std::deque<std::vector<uint8_t>> kept_;
};

std::string dims(int64_t r, int64_t c) { return "[" + std::to_string(r) + "][" + std::to_string(c) + "]"; }

// ---- tests -------------------------------------------------------------------------------------

TEST_F(BackendOps, Embedding) {
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K};
  const int64_t vocab = 50, n_embd = 512;
  std::vector<int32_t> tokens = {0, 49, 7, 7, 13, 1, 48, 25, 3};
  Step step = simple_step(std::vector<int32_t>(tokens.size(), 0));
  step.tokens = tokens;
  step.finish(nullptr, *pool_);
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (DType type : types) {
    const auto& bytes = keep(random_weight(type, vocab, n_embd, rng_));
    const Tensor host = Tensor::matrix(bytes.data(), type, vocab, n_embd);
    std::vector<float> out[2];
    for (int which = 0; which < 2; ++which) {
      Backend& b = which == 0 ? *cpu_ : *dev_;
      auto w = b.prepare_weight(host, "token_embd.weight");
      ASSERT_TRUE(w.is_ok()) << w.status().to_string();
      if (which == 1) {  // tied output: the same host tensor is uploaded once
        auto again = b.prepare_weight(host, "output.weight");
        ASSERT_TRUE(again.is_ok());
        EXPECT_EQ(again->data, w->data);
      }
      Mat o = make_mat(b, n, n_embd);
      poison(b, o);
      HS_ASSERT_OK(b.begin_step(step.plan));
      HS_ASSERT_OK(b.embedding(*w, o.t));
      HS_ASSERT_OK(b.end_step());
      out[which] = download(b, o);
    }
    const std::string shape = dims(vocab, n_embd) + " " + std::string(dtype_name(type)) + " x" + std::to_string(n);
    // 16-bit rows: f16 (|error| <= 2^-11 |x|) for the other block types, bf16 (2^-9) for F32;
    // exact for BF16 sources and for Q4_0 / Q8_0 / Q4_K (kept quantized, dequantized as the host does).
    const bool exact = type == DType::BF16 || type == DType::Q4_0 || type == DType::Q8_0 || type == DType::Q4_K;
    check("embedding", shape, out[1], out[0], exact ? 0.0 : 4e-3, exact ? 0.0 : 4e-3);
  }
}

TEST_F(BackendOps, Matmul) {
  struct TypeCase {
    DType type;
    std::vector<int64_t> n_in;
  };
  const TypeCase types[] = {
      {DType::F32, {64, 96, 1000}}, {DType::F16, {64, 544}},  {DType::BF16, {96, 992}},
      {DType::Q4_0, {96, 544, 992}}, {DType::Q4_1, {544}},     {DType::Q5_0, {544}},
      {DType::Q5_1, {544}},          {DType::Q8_0, {96, 544, 992}}, {DType::Q4_K, {256, 768}},
      {DType::Q5_K, {768}},          {DType::Q6_K, {256, 768}},
  };
  const int64_t n_out = 67;
  for (const auto& tc : types) {
    for (int64_t n_in : tc.n_in) {
      const auto& bytes = keep(random_weight(tc.type, n_out, n_in, rng_));
      const Tensor host = Tensor::matrix(bytes.data(), tc.type, n_out, n_in);
      Tensor w[2];
      for (int which = 0; which < 2; ++which) {
        auto r = (which == 0 ? *cpu_ : *dev_).prepare_weight(host, "blk.0.attn_q.weight");
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        w[which] = *r;
      }
      for (int64_t n : {1, 2, 7, 8, 9, 17, 64, 128}) {  // quantized 1..8: GEMV kernels, 9..128: the quantized GEMM; 16-bit 1..2: GEMV; else cuBLAS
        Step step = simple_step(std::vector<int32_t>(static_cast<size_t>(n), 0));
        std::vector<std::vector<float>> ref, got;
        run_both(step.plan, {{{n, n_in}, normal(rng_, static_cast<size_t>(n * n_in), 1.0f, true)}}, {{n, n_out}},
                 [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
                   return b.matmul(w[&b == cpu_.get() ? 0 : 1], in[0], out[0]);
                 },
                 ref, got);
        if (HasFatalFailure()) return;
        // The GEMV kernels read Q4_0 / Q8_0 / Q4_K kept quantized and F16 / BF16 as they are, and
        // split x into exact 16-bit terms: within float rounding of the CPU's exact matmul. The
        // rest rounds weights (dequantized to f16, F32 to bf16) and inputs to 16 bits.
        const bool kept_quant = tc.type == DType::Q4_0 || tc.type == DType::Q8_0 || tc.type == DType::Q4_K;
        const bool sixteen = tc.type == DType::F16 || tc.type == DType::BF16;
        const bool tight = (kept_quant && n < kGemmQuantRows) || (sixteen && n <= 2);
        // Quantized weights at 1-2 rows run the warp-per-row kernel on x quantized to int16 per
        // 32 columns (gemv_quant_warp.h: ~2^-16 of sum |w| max|x| per block).
        // x as int16 (the dp2a warp GEMV): Q4_0 / Q8_0 up to 4 rows, Q4_K up to 2 (the defaults:
        // HS_CUDA_GEMMQ_MIN / HS_CUDA_QW_ROWS move these bounds and would fail the tight checks).
        const bool int16_x = (n <= 2 && tc.type == DType::Q4_K) ||
                             (n <= kWarpGemvRows && (tc.type == DType::Q4_0 || tc.type == DType::Q8_0));
        const double tol = int16_x ? 5e-4 : tight ? 1e-5 : 1e-2, max_tol = int16_x ? 1e-3 : tight ? 3e-5 : 3e-2;
        check("matmul", dims(n, n_in) + " x " + std::string(dtype_name(tc.type)) + dims(n_out, n_in), got[0], ref[0],
              tol, max_tol);
      }
    }
  }
}

TEST_F(BackendOps, MatmulMulti) {
  const int64_t n = 7, n_in = 544;
  const int64_t outs[] = {96, 32, 32};
  std::vector<std::vector<uint8_t>> bytes;
  for (int64_t o : outs) bytes.push_back(random_weight(DType::Q8_0, o, n_in, rng_));
  Tensor w[2][3];
  for (int which = 0; which < 2; ++which)
    for (int i = 0; i < 3; ++i) {
      auto r = (which == 0 ? *cpu_ : *dev_).prepare_weight(Tensor::matrix(bytes[i].data(), DType::Q8_0, outs[i], n_in), "w");
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      w[which][i] = *r;
    }
  Step step = simple_step(std::vector<int32_t>(n, 0));
  std::vector<std::vector<float>> ref, got;
  run_both(step.plan, {{{n, n_in}, normal(rng_, n * n_in)}}, {{n, outs[0]}, {n, outs[1]}, {n, outs[2]}},
           [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
             const int which = &b == cpu_.get() ? 0 : 1;
             return b.matmul_multi(std::span<const Tensor>(w[which], 3), in[0], std::span<const Tensor>(out.data(), 3));
           },
           ref, got);
  if (HasFatalFailure()) return;
  for (int i = 0; i < 3; ++i) check("matmul_multi", dims(n, n_in) + " x q8_0" + dims(outs[i], n_in), got[i], ref[i], 1e-2, 3e-2);
}

// Weights prepared together (prepare_weight_group: back to back on the device) through
// matmul_multi at every batch path: the GEMV kernels, and above them cuBLAS (q / k / v-like
// shapes as one fused GEMM split into the outputs; gate / up-like ones each alone).
TEST_F(BackendOps, MatmulMultiGroupedWeights) {
  const int64_t n_in = 544;
  const std::vector<std::vector<int64_t>> shapes = {{96, 32, 32}, {64, 64}};
  for (DType type : {DType::BF16, DType::F16, DType::Q8_0}) {
    for (const auto& outs : shapes) {
      const size_t m = outs.size();
      std::vector<Tensor> hosts;
      std::vector<std::string> names;
      for (size_t i = 0; i < m; ++i) {
        const auto& bytes = keep(random_weight(type, outs[i], n_in, rng_));
        hosts.push_back(Tensor::matrix(bytes.data(), type, outs[i], n_in));
        names.push_back("blk.0.w" + std::to_string(i));
      }
      std::vector<Tensor> w[2];
      for (int which = 0; which < 2; ++which) {
        auto r = (which == 0 ? *cpu_ : *dev_).prepare_weight_group(hosts, names);
        ASSERT_TRUE(r.is_ok()) << r.status().to_string();
        w[which] = *r;
        ASSERT_EQ(w[which].size(), m);
      }
      for (size_t i = 1; i < m; ++i)  // the device placed them back to back
        EXPECT_EQ(static_cast<const uint8_t*>(w[1][i].data),
                  static_cast<const uint8_t*>(w[1][i - 1].data) + w[1][i - 1].rows * w[1][i - 1].row_stride);
      for (int64_t n : {1, 2, 7, 40}) {
        Step step = simple_step(std::vector<int32_t>(static_cast<size_t>(n), 0));
        std::vector<std::vector<int64_t>> out_shapes;
        for (int64_t o : outs) out_shapes.push_back({n, o});
        std::vector<std::vector<float>> ref, got;
        run_both(step.plan, {{{n, n_in}, normal(rng_, static_cast<size_t>(n * n_in), 1.0f, true)}}, out_shapes,
                 [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
                   const auto& wv = w[&b == cpu_.get() ? 0 : 1];
                   return b.matmul_multi(wv, in[0], std::span<const Tensor>(out.data(), m));
                 },
                 ref, got);
        if (HasFatalFailure()) return;
        const bool quant = type == DType::Q8_0;
        const bool int16_x = quant && n <= kWarpGemvRows, tight = (quant && n < kGemmQuantRows) || (!quant && n <= 2);
        const double tol = int16_x ? 5e-4 : tight ? 1e-5 : 1e-2, max_tol = int16_x ? 1e-3 : tight ? 3e-5 : 3e-2;
        for (size_t i = 0; i < m; ++i)
          check("matmul_multi", dims(n, n_in) + " x grouped " + std::string(dtype_name(type)) + dims(outs[i], n_in),
                got[i], ref[i], tol, max_tol);
      }
    }
  }
}

// rms_norm / add_rms_norm / glu write the next matmul's 16-bit input beside their f32 output on a
// decode-sized batch (the matmul then skips its conversion): the matmul's result must be bitwise
// that of converting afterwards (an op in between — scale by 1 — drops the early copy), and an
// op that overwrites the tensor (copy) must not leave a stale copy behind.
TEST_F(BackendOps, EarlyMatmulInputCopyIsExactAndNeverStale) {
  const int64_t n = 8, d = 512, ff = 768;
  const auto& wb = keep(random_weight(DType::BF16, 96, d, rng_));
  const auto& wb2 = keep(random_weight(DType::BF16, 64, ff, rng_));
  const std::vector<float> nw = normal(rng_, static_cast<size_t>(d), 1.0f);
  Tensor w[2], w2[2], nv[2];
  for (int which = 0; which < 2; ++which) {
    Backend& b = which == 0 ? *cpu_ : *dev_;
    auto r = b.prepare_weight(Tensor::matrix(wb.data(), DType::BF16, 96, d), "w");
    auto r2 = b.prepare_weight(Tensor::matrix(wb2.data(), DType::BF16, 64, ff), "w2");
    auto rv = b.prepare_vector(nw, "norm");
    ASSERT_TRUE(r.is_ok() && r2.is_ok() && rv.is_ok());
    w[which] = *r;
    w2[which] = *r2;
    nv[which] = *rv;
  }
  Step step = simple_step(std::vector<int32_t>(static_cast<size_t>(n), 0));
  const auto x = normal(rng_, static_cast<size_t>(n * d), 2.0f, true);
  const auto y = normal(rng_, static_cast<size_t>(n * d), 1.0f, true);
  const auto other = normal(rng_, static_cast<size_t>(n * d), 1.0f, true);
  const auto g = normal(rng_, static_cast<size_t>(n * ff), 1.0f, true);
  const auto u = normal(rng_, static_cast<size_t>(n * ff), 1.0f, true);
  // ins: x, y, other, gate, up; outs: h [n][d], m1 [n][96], a [n][ff], m2 [n][64], m3 [n][96]
  std::vector<std::vector<float>> first;  // the CUDA outputs with the early copies used
  for (int between = 0; between < 2; ++between) {  // 0: early copy used; 1: dropped by scale(.., 1)
    std::vector<std::vector<float>> ref, got;
    run_both(step.plan, {{{n, d}, x}, {{n, d}, y}, {{n, d}, other}, {{n, ff}, g}, {{n, ff}, u}},
             {{n, d}, {n, 96}, {n, ff}, {n, 64}, {n, 96}},
             [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
               const int wi = &b == cpu_.get() ? 0 : 1;
               HS_RETURN_IF_ERROR(b.add_rms_norm(in[0], in[1], nv[wi], 1e-6f, out[0]));
               if (between) HS_RETURN_IF_ERROR(b.scale(out[0], 1.0f));
               HS_RETURN_IF_ERROR(b.matmul(w[wi], out[0], out[1]));
               HS_RETURN_IF_ERROR(b.glu(GluKind::kSilu, in[3], in[4], out[2]));
               if (between) HS_RETURN_IF_ERROR(b.scale(out[2], 1.0f));
               HS_RETURN_IF_ERROR(b.matmul(w2[wi], out[2], out[3]));
               // Staleness: norm into h, then h overwritten; the matmul must read the new h.
               HS_RETURN_IF_ERROR(b.rms_norm(in[0], nv[wi], 1e-6f, out[0]));
               HS_RETURN_IF_ERROR(b.copy(in[2], out[0]));
               return b.matmul(w[wi], out[0], out[4]);
             },
             ref, got);
    if (HasFatalFailure()) return;
    check("early copy", "add_rms_norm -> matmul", got[1], ref[1], 1e-2, 3e-2);
    check("early copy", "glu -> matmul", got[3], ref[3], 1e-2, 3e-2);
    check("early copy", "norm, copy -> matmul", got[4], ref[4], 1e-2, 3e-2);
    if (between == 0) {
      first = got;
    } else {
      for (int i : {1, 3, 4})
        EXPECT_EQ(std::memcmp(got[i].data(), first[i].data(), got[i].size() * 4), 0)
            << "output " << i << ": the early 16-bit copy changed the matmul's result";
    }
  }
}

// Batch 1-2 before a quantized GEMV: rms_norm / add_rms_norm / glu / rms_norm_gated write the GEMV's int16 x
// records beside their f32 output (CudaBackend::outq_for) and the GEMV skips its own quantize
// kernel. The records must be the bytes the GEMV would have made, so y is bitwise the run where a
// scale(.., 1) between drops them; an op writing the tensor after the norm must drop them too.
TEST_F(BackendOps, EarlyQuantizedInputIsExactAndNeverStale) {
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K}) {
    for (int64_t n : {1, 2}) {
      const int64_t d = 768, ff = 1280, o1 = 96, o2 = 64;  // 768: a Q4 u-step and a half (padded records)
      auto fresh = make_backend(Device::kCuda);  // its own quantized kind: only this type prepared
      ASSERT_TRUE(fresh.is_ok()) << fresh.status().to_string();
      dev_ = std::move(*fresh);
#if defined(HS_WITH_CUDA)
      if (auto* cuda = dynamic_cast<cuda::CudaBackend*>(dev_.get())) cuda->set_early_quantized_inputs(true);
#endif
      const auto& wb = keep(random_weight(type, o1, d, rng_));
      const auto& wk = keep(random_weight(type, o2, d, rng_));
      const auto& wb2 = keep(random_weight(type, o2, ff, rng_));
      const int64_t gd = 1024, grp = 128;  // the gated norm's rows: whole u-steps of every kind, heads of 128
      const auto& wbg = keep(random_weight(type, o1, gd, rng_));
      const std::vector<float> nw = normal(rng_, static_cast<size_t>(d), 1.0f);
      const std::vector<float> gw = normal(rng_, static_cast<size_t>(grp), 1.0f);
      Tensor w[2], wkk[2], w2[2], nv[2], wg[2], gv[2];
      for (int which = 0; which < 2; ++which) {
        Backend& b = which == 0 ? *cpu_ : *dev_;
        auto r = b.prepare_weight(Tensor::matrix(wb.data(), type, o1, d), "w");
        auto rk = b.prepare_weight(Tensor::matrix(wk.data(), type, o2, d), "wk");
        auto r2 = b.prepare_weight(Tensor::matrix(wb2.data(), type, o2, ff), "w2");
        auto rv = b.prepare_vector(nw, "norm");
        auto rg = b.prepare_weight(Tensor::matrix(wbg.data(), type, o1, gd), "wg");
        auto rgv = b.prepare_vector(gw, "gated norm");
        ASSERT_TRUE(r.is_ok() && rk.is_ok() && r2.is_ok() && rv.is_ok() && rg.is_ok() && rgv.is_ok());
        w[which] = *r;
        wkk[which] = *rk;
        w2[which] = *r2;
        nv[which] = *rv;
        wg[which] = *rg;
        gv[which] = *rgv;
      }
      Step step = simple_step(std::vector<int32_t>(static_cast<size_t>(n), 0));
      const auto x = normal(rng_, static_cast<size_t>(n * d), 2.0f, true);
      const auto y = normal(rng_, static_cast<size_t>(n * d), 1.0f, true);
      const auto other = normal(rng_, static_cast<size_t>(n * d), 1.0f, true);
      const auto g = normal(rng_, static_cast<size_t>(n * ff), 1.0f, true);
      const auto u = normal(rng_, static_cast<size_t>(n * ff), 1.0f, true);
      const auto core = normal(rng_, static_cast<size_t>(n * gd), 1.0f, true);
      const auto zg = normal(rng_, static_cast<size_t>(n * gd), 1.0f, true);
      // ins: x, y, other, gate, up, core, z; outs: h, m1 [n][o1], a [n][ff], m2 [n][o2], m3 [n][o1],
      // m4 [n][o2], m5 [n][o1], gated [n][gd], m6 [n][o1]
      std::vector<std::vector<float>> first;
      for (int between = 0; between < 2; ++between) {  // 0: early records used; 1: dropped by scale(.., 1)
        std::vector<std::vector<float>> ref, got;
        run_both(step.plan,
                 {{{n, d}, x}, {{n, d}, y}, {{n, d}, other}, {{n, ff}, g}, {{n, ff}, u}, {{n, gd}, core}, {{n, gd}, zg}},
                 {{n, d}, {n, o1}, {n, ff}, {n, o2}, {n, o1}, {n, o2}, {n, o1}, {n, gd}, {n, o1}},
                 [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
                   const int wi = &b == cpu_.get() ? 0 : 1;
                   // The gated norm (a linear layer's output) before its out projection.
                   HS_RETURN_IF_ERROR(b.rms_norm_gated(in[5], in[6], gv[wi], 1e-6f, out[7]));
                   if (between) HS_RETURN_IF_ERROR(b.scale(out[7], 1.0f));
                   HS_RETURN_IF_ERROR(b.matmul(wg[wi], out[7], out[8]));
                   HS_RETURN_IF_ERROR(b.add_rms_norm(in[0], in[1], nv[wi], 1e-6f, out[0]));
                   if (between) HS_RETURN_IF_ERROR(b.scale(out[0], 1.0f));
                   HS_RETURN_IF_ERROR(b.matmul(w[wi], out[0], out[1]));
                   HS_RETURN_IF_ERROR(b.glu(GluKind::kSilu, in[3], in[4], out[2]));
                   if (between) HS_RETURN_IF_ERROR(b.scale(out[2], 1.0f));
                   HS_RETURN_IF_ERROR(b.matmul(w2[wi], out[2], out[3]));
                   // Staleness: norm into h, then h overwritten; the matmul must read the new h.
                   HS_RETURN_IF_ERROR(b.rms_norm(in[0], nv[wi], 1e-6f, out[0]));
                   HS_RETURN_IF_ERROR(b.copy(in[2], out[0]));
                   HS_RETURN_IF_ERROR(b.matmul(w[wi], out[0], out[4]));
                   // A norm's records shared by a two-weight launch (q / k).
                   HS_RETURN_IF_ERROR(b.rms_norm(in[2], nv[wi], 1e-6f, out[0]));
                   if (between) HS_RETURN_IF_ERROR(b.scale(out[0], 1.0f));
                   const Tensor ws[] = {w[wi], wkk[wi]};
                   const Tensor ys[] = {out[6], out[5]};
                   return b.matmul_multi(ws, out[0], ys);
                 },
                 ref, got);
        if (HasFatalFailure()) return;
        const std::string what = std::string(dtype_name(type)) + " n=" + std::to_string(n);
        check("early quant", "add_rms_norm -> matmul " + what, got[1], ref[1], 5e-4, 1e-3);
        check("early quant", "glu -> matmul " + what, got[3], ref[3], 5e-4, 1e-3);
        check("early quant", "norm, copy -> matmul " + what, got[4], ref[4], 5e-4, 1e-3);
        check("early quant", "norm -> matmul_multi " + what, got[5], ref[5], 5e-4, 1e-3);
        check("early quant", "norm -> matmul_multi " + what, got[6], ref[6], 5e-4, 1e-3);
        check("early quant", "rms_norm_gated -> matmul " + what, got[8], ref[8], 5e-4, 1e-3);
        if (between == 0) {
          first = got;
        } else {
          for (int i : {1, 2, 3, 4, 5, 6, 8})
            EXPECT_EQ(std::memcmp(got[i].data(), first[i].data(), got[i].size() * 4), 0)
                << what << " output " << i << ": the early records changed the result; " << seed_note();
        }
      }
    }
  }
}

TEST_F(BackendOps, RmsNorm) {
  std::uniform_int_distribution<int64_t> rows_d(1, 33);
  for (int64_t width : {64, 576, 640}) {
    for (int variant = 0; variant < 3; ++variant) {  // 0: weight, 1: no weight, 2: weight, in place
      const int64_t rows = rows_d(rng_);
      const std::vector<float> w = normal(rng_, static_cast<size_t>(width), 1.0f);
      Tensor wt[2];
      prepare_both(w, wt);
      if (HasFatalFailure()) return;
      if (variant == 1) wt[0] = wt[1] = Tensor{};
      Step step = simple_step(std::vector<int32_t>(static_cast<size_t>(rows), 0));
      std::vector<std::vector<float>> ref, got;
      const bool in_place = variant == 2;
      run_both(step.plan, {{{rows, width}, normal(rng_, static_cast<size_t>(rows * width), 3.0f, true)}},
               in_place ? std::vector<std::vector<int64_t>>{} : std::vector<std::vector<int64_t>>{{rows, width}},
               [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
                 const Tensor& wv = wt[&b == cpu_.get() ? 0 : 1];
                 return b.rms_norm(in[0], wv, 1e-6f, in_place ? in[0] : out[0]);
               },
               ref, got);
      if (HasFatalFailure()) return;
      const char* what[] = {" w", " no w", " w in place"};
      check("rms_norm", dims(rows, width) + what[variant], got[0], ref[0], 1e-5);
    }
    // A strided input: the second half of each row of [rows][2 * width] (Qwen3.5's q beside its
    // gate), into a dense output.
    const int64_t rows = rows_d(rng_);
    const std::vector<float> w = normal(rng_, static_cast<size_t>(width), 1.0f);
    Tensor wt[2];
    prepare_both(w, wt);
    if (HasFatalFailure()) return;
    Step step = simple_step(std::vector<int32_t>(static_cast<size_t>(rows), 0));
    std::vector<std::vector<float>> ref, got;
    run_both(step.plan, {{{rows, 2 * width}, normal(rng_, static_cast<size_t>(rows * 2 * width), 3.0f, true)}},
             {{rows, width}},
             [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
               Tensor half = in[0];
               half.data = in[0].f32() + width;
               half.cols = width;
               return b.rms_norm(half, wt[&b == cpu_.get() ? 0 : 1], 1e-6f, out[0]);
             },
             ref, got);
    if (HasFatalFailure()) return;
    check("rms_norm", dims(rows, width) + " w strided input", got[0], ref[0], 1e-5);
  }
}

TEST_F(BackendOps, Rope) {
  const std::vector<int32_t> positions = {0, 1, 17, 4095, 65537, 100000};
  const int64_t n = static_cast<int64_t>(positions.size());
  for (int hd : {64, 128, 256}) {
    for (bool neox : {false, true}) {
      for (float theta : {10000.0f, 1000000.0f}) {
        const int64_t cols = 3 * hd;
        Step step = simple_step(positions);
        std::vector<std::vector<float>> ref, got;
        run_both(step.plan, {{{n, cols}, normal(rng_, static_cast<size_t>(n * cols))}}, {},
                 [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>&) { return b.rope(in[0], hd, theta, neox); },
                 ref, got);
        if (HasFatalFailure()) return;
        check("rope", dims(n, cols) + " hd " + std::to_string(hd) + (neox ? " neox" : " pairs") + " theta " +
                          std::to_string(static_cast<int64_t>(theta)) + " pos<=1e5",
              got[0], ref[0], 1e-5);
      }
    }
  }
}

// The fused residual add + norm: both outputs (the sum written back to x, and the norm) against
// the CPU's add then rms_norm, and bitwise against the device's own two ops.
TEST_F(BackendOps, AddRmsNorm) {
  std::uniform_int_distribution<int64_t> rows_d(1, 70);
  for (int64_t width : {66, 576, 4096}) {  // 66: rows not float4-aligned (the two-kernel path)
    const int64_t rows = rows_d(rng_);
    const std::vector<float> w = normal(rng_, static_cast<size_t>(width), 1.0f);
    Tensor wt[2];
    prepare_both(w, wt);
    if (HasFatalFailure()) return;
    Step step = simple_step(std::vector<int32_t>(static_cast<size_t>(rows), 0));
    const auto x = normal(rng_, static_cast<size_t>(rows * width), 3.0f, true);
    const auto y = normal(rng_, static_cast<size_t>(rows * width), 1.0f, true);
    std::vector<std::vector<float>> ref, got, ref2, sep;
    run_both(step.plan, {{{rows, width}, x}, {{rows, width}, y}}, {{rows, width}},
             [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
               return b.add_rms_norm(in[0], in[1], wt[&b == cpu_.get() ? 0 : 1], 1e-6f, out[0]);
             },
             ref, got);
    if (HasFatalFailure()) return;
    check("add_rms_norm (norm)", dims(rows, width), got[0], ref[0], 1e-5);
    check("add_rms_norm (x + y)", dims(rows, width), got[1], ref[1], 0);
    run_both(step.plan, {{{rows, width}, x}, {{rows, width}, y}}, {{rows, width}},
             [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
               HS_RETURN_IF_ERROR(b.add(in[0], in[1]));
               return b.rms_norm(in[0], wt[&b == cpu_.get() ? 0 : 1], 1e-6f, out[0]);
             },
             ref2, sep);
    if (HasFatalFailure()) return;
    EXPECT_EQ(got[0], sep[0]) << "fused add_rms_norm differs from add + rms_norm on the device " << dims(rows, width);
    EXPECT_EQ(got[1], sep[1]);
  }
}

// RoPE of q and k in one launch: q with more heads than k (GQA), against the CPU's two ropes.
TEST_F(BackendOps, RopeQk) {
  const std::vector<int32_t> positions = {0, 3, 4095, 100000, 7};
  const int64_t n = static_cast<int64_t>(positions.size());
  for (int hd : {64, 128}) {
    for (bool neox : {false, true}) {
      const int64_t qc = 8 * hd, kc = 2 * hd;
      Step step = simple_step(positions);
      std::vector<std::vector<float>> ref, got;
      run_both(step.plan,
               {{{n, qc}, normal(rng_, static_cast<size_t>(n * qc))}, {{n, kc}, normal(rng_, static_cast<size_t>(n * kc))}},
               {},
               [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>&) {
                 return b.rope_qk(in[0], in[1], hd, 500000.0f, neox);
               },
               ref, got);
      if (HasFatalFailure()) return;
      const std::string what = " hd " + std::to_string(hd) + (neox ? " neox" : " pairs");
      check("rope_qk (q)", dims(n, qc) + what, got[0], ref[0], 1e-5);
      check("rope_qk (k)", dims(n, kc) + what, got[1], ref[1], 1e-5);
    }
  }
}

#if defined(HS_WITH_CUDA)
// Layers la and lb of the CUDA backend's KV pages read back and compared byte for byte (bad: how
// many differ); la must hold at least min_nonzero nonzero bytes (something was written).
void compare_pages(cuda::CudaBackend& cuda, const KvCache& kv, int la, int lb, size_t min_nonzero,
                   const std::string& what, size_t& bad) {
  const size_t layer_bytes = static_cast<size_t>(kv.pool().n_blocks() * kv.geometry().page_bytes());
  std::vector<uint8_t> pa(layer_bytes, 0xcd), pb(layer_bytes, 0xab);
  HS_ASSERT_OK(cuda.read_kv_pages(la, pa.data()));
  HS_ASSERT_OK(cuda.read_kv_pages(lb, pb.data()));
  size_t nonzero = 0;
  bad = 0;
  for (size_t i = 0; i < layer_bytes; ++i) {
    bad += pa[i] != pb[i];
    nonzero += pa[i] != 0;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << layer_bytes << " page bytes differ; " << seed_note();
  EXPECT_GE(nonzero, min_nonzero) << what << ": " << nonzero << " nonzero page bytes";
}
#endif

// rope_qk_kv_write: the CUDA backend's one kernel against its own rope_qk then kv_write, bit for
// bit (q, k and the page bytes: layer 0 written fused, layer 1 by the two ops from the same
// inputs), for every plain KV dtype and the scaled fp8 / int8 / int4 pages (encoded in the kernel
// by a warp a kv head after the block's rotation), pages scattered, two sequences, positions
// across page boundaries; and against the CPU's rope for q / k.
TEST_F(BackendOps, RopeQkKvWriteEqualsTheTwoOps) {
#if defined(HS_WITH_CUDA)
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(dev_.get());
  ASSERT_NE(cuda, nullptr);
  struct Case {
    KvDtype dtype;
    int hd, n_head, n_kv;
  };
  const Case cases[] = {{KvDtype::kF16, 128, 8, 2}, {KvDtype::kF16, 64, 9, 3}, {KvDtype::kBF16, 128, 32, 8},
                        {KvDtype::kF32, 80, 4, 4},  {KvDtype::kBF16, 256, 4, 1}, {KvDtype::kFp8, 128, 8, 2},
                        {KvDtype::kInt4, 128, 8, 2}, {KvDtype::kInt8, 128, 32, 8},  // scaled: encoded in the kernel
                        {KvDtype::kInt4, 64, 9, 3}};
  for (const Case& c : cases) {
    for (bool neox : {false, true}) {
      constexpr int kP = 16;
      KvCache kv(KvGeometry{2, c.n_kv, c.hd, kP, c.dtype}, 16);
      SeqKv a, b;
      Step step;
      const std::pair<int32_t, int32_t> tokens[] = {{0, 0},  {15, 0}, {16, 0}, {39, 0}, {1, 1},
                                                    {31, 1}, {32, 1}, {47, 1}, {69, 1}};  // (position, sequence)
      two_sequence_step(kv, a, b, tokens, step);
      if (HasFatalFailure()) return;
      const int64_t n = static_cast<int64_t>(step.positions.size()), qc = int64_t{c.n_head} * c.hd,
                    kc = int64_t{c.n_kv} * c.hd;
      const auto q = normal(rng_, static_cast<size_t>(n * qc)), k = normal(rng_, static_cast<size_t>(n * kc)),
                 v = normal(rng_, static_cast<size_t>(n * kc));
      Mat q0 = make_mat(*dev_, n, qc), k0 = make_mat(*dev_, n, kc), v0 = make_mat(*dev_, n, kc);
      Mat q1 = make_mat(*dev_, n, qc), k1 = make_mat(*dev_, n, kc), v1 = make_mat(*dev_, n, kc);
      for (Mat* m : {&q0, &q1}) upload(*dev_, *m, q);
      for (Mat* m : {&k0, &k1}) upload(*dev_, *m, k);
      for (Mat* m : {&v0, &v1}) upload(*dev_, *m, v);
      const float theta = 10000.0f;
      HS_ASSERT_OK(dev_->begin_step(step.plan));
      HS_ASSERT_OK(dev_->rope_qk_kv_write(0, q0.t, k0.t, v0.t, c.hd, theta, neox));
      HS_ASSERT_OK(dev_->rope_qk(q1.t, k1.t, c.hd, theta, neox));
      HS_ASSERT_OK(dev_->kv_write(1, k1.t, v1.t));
      HS_ASSERT_OK(dev_->end_step());
      const std::string what = std::string(kv_dtype_name(c.dtype)) + " hd " + std::to_string(c.hd) + " heads " +
                               std::to_string(c.n_head) + "/" + std::to_string(c.n_kv) + (neox ? " neox" : " pairs");
      const auto qf = download(*dev_, q0), qu = download(*dev_, q1), kf = download(*dev_, k0), ku = download(*dev_, k1);
      EXPECT_EQ(std::memcmp(qf.data(), qu.data(), qf.size() * 4), 0) << what << ": q differs; " << seed_note();
      EXPECT_EQ(std::memcmp(kf.data(), ku.data(), kf.size() * 4), 0) << what << ": k differs; " << seed_note();
      // Something was written: about every byte of the step's K and V rows is nonzero.
      size_t bad = 0;
      compare_pages(*cuda, kv, 0, 1, static_cast<size_t>(n * kc), what, bad);
      if (HasFatalFailure()) return;
      // q / k against the CPU's rope.
      std::vector<std::vector<float>> ref, got;
      Step plain = simple_step(step.positions);
      run_both(plain.plan, {{{n, qc}, q}, {{n, kc}, k}}, {},
               [&](Backend& be, std::vector<Tensor>& in, std::vector<Tensor>&) {
                 return be.rope_qk(in[0], in[1], c.hd, theta, neox);
               },
               ref, got);
      if (HasFatalFailure()) return;
      check("rope_qk_kv", dims(n, qc) + " q " + what, qf, ref[0], 1e-5);
      check("rope_qk_kv", dims(n, kc) + " k " + what, kf, ref[1], 1e-5);
      print_header();
      std::printf("%-12s %-46s %12zu %12s %10s%s\n", "rope_qk_kv", ("page bytes " + what).c_str(), bad, "bytes", "0",
                  bad == 0 ? "" : "  FAIL");
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// qk_norm_rope_kv_write (Qwen3.5's gated attention): the CUDA backend's one kernel against the
// base class's composition on the same device (rms_norm of q's heads from the strided q half of
// each [q | gate] head row and of k's in place, rope_partial of both, kv_write), within 1e-5 for
// q and k (the kernel sums a head's squares in another order); and its page bytes bit for bit
// those that kv_write gives from its own k and v (layer 0 fused, layer 2 by kv_write). Plain KV
// dtypes and the scaled fp8 / int8 / int4 pages (encoded in the kernel by the warp that normed the
// head), partial and whole rotations, GQA, scattered pages.
TEST_F(BackendOps, QkNormRopeKvWriteEqualsTheOps) {
#if defined(HS_WITH_CUDA)
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(dev_.get());
  ASSERT_NE(cuda, nullptr);
  struct Case {
    KvDtype dtype;
    int hd, rot, n_head, n_kv;
  };
  const Case cases[] = {{KvDtype::kF16, 256, 64, 8, 2},  {KvDtype::kBF16, 256, 64, 6, 2}, {KvDtype::kF32, 128, 128, 4, 4},
                        {KvDtype::kF16, 96, 32, 3, 1},   {KvDtype::kBF16, 512, 128, 2, 1}, {KvDtype::kInt4, 256, 64, 4, 2},
                        {KvDtype::kInt8, 256, 64, 24, 4}, {KvDtype::kFp8, 128, 32, 4, 2},  // scaled pages, encoded
                        {KvDtype::kInt4, 96, 32, 3, 1},    // by the warp that norms the head
                        {KvDtype::kBF16, 256, 64, 24, 4},  // the 27B's shape: a warp takes 3 q heads
                        {KvDtype::kF16, 128, 128, 16, 16}};  // 2 k heads a warp
  for (const Case& c : cases) {
    for (bool neox : {true, false}) {
      constexpr int kP = 16;
      KvCache kv(KvGeometry{3, c.n_kv, c.hd, kP, c.dtype}, 16);
      SeqKv a, b;
      Step step;
      const std::pair<int32_t, int32_t> tokens[] = {{0, 0}, {15, 0}, {16, 0}, {39, 0}, {1, 1}, {32, 1}, {69, 1}};
      two_sequence_step(kv, a, b, tokens, step);
      if (HasFatalFailure()) return;
      const int64_t n = static_cast<int64_t>(step.positions.size()), qc = int64_t{c.n_head} * c.hd,
                    kc = int64_t{c.n_kv} * c.hd;
      const auto qg = normal(rng_, static_cast<size_t>(n * 2 * qc), 3.0f), k = normal(rng_, static_cast<size_t>(n * kc)),
                 v = normal(rng_, static_cast<size_t>(n * kc));
      std::vector<float> wq(static_cast<size_t>(c.hd)), wk(static_cast<size_t>(c.hd));
      std::uniform_real_distribution<float> u(0.5f, 1.5f);
      for (float& x : wq) x = u(rng_);
      for (float& x : wk) x = u(rng_);
      Tensor nq[2], nk[2];
      prepare_both(wq, nq);
      prepare_both(wk, nk);
      if (HasFatalFailure()) return;
      Mat g0 = make_mat(*dev_, n, 2 * qc), g1 = make_mat(*dev_, n, 2 * qc);
      Mat q0 = make_mat(*dev_, n, qc), k0 = make_mat(*dev_, n, kc), v0 = make_mat(*dev_, n, kc);
      Mat q1 = make_mat(*dev_, n, qc), k1 = make_mat(*dev_, n, kc), v1 = make_mat(*dev_, n, kc);
      for (Mat* m : {&g0, &g1}) upload(*dev_, *m, qg);
      for (Mat* m : {&q0, &q1}) poison(*dev_, *m);
      for (Mat* m : {&k0, &k1}) upload(*dev_, *m, k);
      for (Mat* m : {&v0, &v1}) upload(*dev_, *m, v);
      // The q half of every head's [q | gate] row: [n * n_head][hd], rows 2 * hd apart.
      auto q_half = [&](const Mat& g) {
        Tensor t = g.t.reshaped(2 * c.hd);
        t.cols = c.hd;
        return t;
      };
      const float theta = 10000000.0f, eps = 1e-6f;
      HS_ASSERT_OK(dev_->begin_step(step.plan));
      HS_ASSERT_OK(dev_->qk_norm_rope_kv_write(0, q_half(g0), q0.t, k0.t, v0.t, nq[1], nk[1], eps, c.hd, c.rot, theta,
                                               neox));
      HS_ASSERT_OK(dev_->Backend::qk_norm_rope_kv_write(1, q_half(g1), q1.t, k1.t, v1.t, nq[1], nk[1], eps, c.hd,
                                                        c.rot, theta, neox));
      HS_ASSERT_OK(dev_->kv_write(2, k0.t, v0.t));  // from the fused op's own k
      HS_ASSERT_OK(dev_->end_step());
      const std::string what = std::string(kv_dtype_name(c.dtype)) + " hd " + std::to_string(c.hd) + " rot " +
                               std::to_string(c.rot) + " heads " + std::to_string(c.n_head) + "/" +
                               std::to_string(c.n_kv) + (neox ? " neox" : " pairs");
      check("qk_norm_rope", dims(n, qc) + " q " + what, download(*dev_, q0), download(*dev_, q1), 1e-5);
      check("qk_norm_rope", dims(n, kc) + " k " + what, download(*dev_, k0), download(*dev_, k1), 1e-5);
      size_t bad = 0;
      compare_pages(*cuda, kv, 0, 2, static_cast<size_t>(n * kc), what, bad);
      if (HasFatalFailure()) return;
      print_header();
      std::printf("%-12s %-46s %12zu %12s %10s%s\n", "qk_norm_rope", ("page bytes " + what).c_str(), bad, "bytes", "0",
                  bad == 0 ? "" : "  FAIL");
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

TEST_F(BackendOps, Glu) {
  for (GluKind kind : {GluKind::kSilu, GluKind::kGeluTanh}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 1000}, {1, 4096}, {33, 96}}) {
      Step step = simple_step(std::vector<int32_t>(static_cast<size_t>(rows), 0));
      for (bool in_place : {false, true}) {
        std::vector<std::vector<float>> ref, got;
        run_both(step.plan,
                 {{{rows, cols}, normal(rng_, static_cast<size_t>(rows * cols), 4.0f, true)},
                  {{rows, cols}, normal(rng_, static_cast<size_t>(rows * cols))}},
                 in_place ? std::vector<std::vector<int64_t>>{} : std::vector<std::vector<int64_t>>{{rows, cols}},
                 [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
                   return b.glu(kind, in[0], in[1], in_place ? in[0] : out[0]);
                 },
                 ref, got);
        if (HasFatalFailure()) return;
        check(kind == GluKind::kSilu ? "glu_silu" : "glu_gelu", dims(rows, cols) + (in_place ? " in place" : ""),
              got[0], ref[0], 1e-5);
      }
    }
  }
}

TEST_F(BackendOps, AddScaleSoftcapCopy) {
  const int64_t rows = 9, cols = 700;
  Step step = simple_step(std::vector<int32_t>(rows, 0));
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<std::vector<float>> ref, got;
  run_both(step.plan, {{{rows, cols}, normal(rng_, n)}, {{rows, cols}, normal(rng_, n)}}, {},
           [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>&) { return b.add(in[0], in[1]); }, ref, got);
  if (HasFatalFailure()) return;
  check("add", dims(rows, cols), got[0], ref[0], 1e-6);
  run_both(step.plan, {{{rows, cols}, normal(rng_, n)}}, {},
           [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>&) { return b.scale(in[0], 0.37f); }, ref, got);
  if (HasFatalFailure()) return;
  check("scale", dims(rows, cols), got[0], ref[0], 1e-6);
  run_both(step.plan, {{{rows, cols}, normal(rng_, n, 40.0f)}}, {},
           [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>&) { return b.softcap(in[0], 30.0f); }, ref, got);
  if (HasFatalFailure()) return;
  check("softcap", dims(rows, cols) + " cap 30", got[0], ref[0], 1e-5);
  // copy: all rows, then rows [2, 7) into rows [0, 5) of a wider-strided destination view.
  run_both(step.plan, {{{rows, cols}, normal(rng_, n)}}, {{rows, cols}},
           [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) {
             HS_RETURN_IF_ERROR(b.copy(in[0], out[0]));
             return b.copy(in[0].slice_rows(2, 7), out[0].slice_rows(4, 9));
           },
           ref, got);
  if (HasFatalFailure()) return;
  check("copy", dims(rows, cols) + " + rows 2..7 -> 4..9", got[0], ref[0], 0.0, 0.0);
}

TEST_F(BackendOps, LogitRows) {
  const int64_t rows = 9, cols = 300;
  const std::vector<int32_t> pick = {8, 0, 3, 3};
  Step step = simple_step(std::vector<int32_t>(rows, 0), pick);
  std::vector<std::vector<float>> ref, got;
  run_both(step.plan, {{{rows, cols}, normal(rng_, static_cast<size_t>(rows * cols))}},
           {{static_cast<int64_t>(pick.size()), cols}},
           [&](Backend& b, std::vector<Tensor>& in, std::vector<Tensor>& out) { return b.logit_rows(in[0], out[0]); },
           ref, got);
  if (HasFatalFailure()) return;
  check("logit_rows", dims(rows, cols) + " -> rows 8,0,3,3", got[0], ref[0], 0.0, 0.0);
}

// ---- kv_write + attention ------------------------------------------------------------------------

enum class Scenario { kSingle, kPrefill, kDecode, kChunked };

struct AttnCase {
  Scenario scenario;
  int group, head_dim, window;
  KvDtype dtype;
};

std::string attn_name(const AttnCase& c) {
  const char* sc[] = {"1 tok @0", "prefill 300", "decode L=1,17,5000", "chunk 1000+200"};
  return std::string(sc[static_cast<int>(c.scenario)]) + " G" + std::to_string(c.group) + " hd" +
         std::to_string(c.head_dim) + " w" + std::to_string(c.window) + " " + kv_dtype_name(c.dtype);
}

class AttentionOps : public BackendOps {
 protected:
  void run_case(const AttnCase& c) {
    constexpr int kKvHeads = 2, kLayers = 2, kP = 16;
    const int n_head = kKvHeads * c.group, hd = c.head_dim;
    const int kv_dim = kKvHeads * hd, q_dim = n_head * hd;
    // Sequences: (context already written, then the tokens attended this step).
    std::vector<std::pair<int32_t, int32_t>> seqs;  // (context, new tokens)
    switch (c.scenario) {
      case Scenario::kSingle: seqs = {{0, 1}}; break;
      case Scenario::kPrefill: seqs = {{0, 300}}; break;
      case Scenario::kDecode: seqs = {{0, 1}, {16, 1}, {4999, 1}}; break;
      case Scenario::kChunked: seqs = {{1000, 200}}; break;
    }
    int32_t n_blocks = 8;
    for (auto [ctx, add] : seqs) n_blocks += (ctx + add + kP - 1) / kP;
    KvCache kv(KvGeometry{kLayers, kKvHeads, hd, kP, c.dtype}, n_blocks);
    {  // shuffle the free list so sequences get scattered, unordered pages
      SeqKv all;
      ASSERT_TRUE(kv.reserve(all, n_blocks * kP).is_ok());
      std::shuffle(all.blocks.begin(), all.blocks.end(), rng_);
      kv.release(all);
    }
    std::vector<SeqKv> seq_kv(seqs.size());
    std::vector<SeqKv*> seq_ptrs;
    for (size_t s = 0; s < seqs.size(); ++s) {
      HS_ASSERT_OK(kv.reserve(seq_kv[s], seqs[s].first + seqs[s].second));
      seq_ptrs.push_back(&seq_kv[s]);
    }
    Step ctx_step, step;
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (int32_t p = 0; p < seqs[s].first; ++p) {
        ctx_step.positions.push_back(p);
        ctx_step.seq_index.push_back(static_cast<int32_t>(s));
      }
      for (int32_t p = seqs[s].first; p < seqs[s].first + seqs[s].second; ++p) {
        step.positions.push_back(p);
        step.seq_index.push_back(static_cast<int32_t>(s));
      }
    }
    ctx_step.seqs = seq_ptrs;
    step.seqs = seq_ptrs;
    ctx_step.finish(&kv, *pool_);
    step.finish(&kv, *pool_);
    const int64_t n_ctx = static_cast<int64_t>(ctx_step.positions.size());
    const int64_t n = static_cast<int64_t>(step.positions.size());
    // K / V of both steps for both layers (layer 0 is written too: its pages must not leak
    // into layer 1's attention), and the queries.
    const auto kc = normal(rng_, static_cast<size_t>(n_ctx * kv_dim)), vc = normal(rng_, static_cast<size_t>(n_ctx * kv_dim));
    const auto k0 = normal(rng_, static_cast<size_t>(n * kv_dim)), v0 = normal(rng_, static_cast<size_t>(n * kv_dim));
    const auto k1 = normal(rng_, static_cast<size_t>(n * kv_dim)), v1 = normal(rng_, static_cast<size_t>(n * kv_dim));
    const auto q = normal(rng_, static_cast<size_t>(n * q_dim), 1.5f);
    const AttentionParams p{n_head, kKvHeads, hd, 1.0f / std::sqrt(static_cast<float>(hd)), c.window};

    std::vector<float> out[2];
    for (int which = 0; which < 2; ++which) {
      Backend& b = which == 0 ? *cpu_ : *dev_;
      if (n_ctx > 0) {
        Mat km = make_mat(b, n_ctx, kv_dim), vm = make_mat(b, n_ctx, kv_dim);
        upload(b, km, kc);
        upload(b, vm, vc);
        HS_ASSERT_OK(b.begin_step(ctx_step.plan));
        HS_ASSERT_OK(b.kv_write(1, km.t, vm.t));
        HS_ASSERT_OK(b.kv_write(0, vm.t, km.t));
        HS_ASSERT_OK(b.end_step());
      }
      Mat k0m = make_mat(b, n, kv_dim), v0m = make_mat(b, n, kv_dim), k1m = make_mat(b, n, kv_dim),
          v1m = make_mat(b, n, kv_dim), qm = make_mat(b, n, q_dim), om = make_mat(b, n, q_dim);
      upload(b, k0m, k0);
      upload(b, v0m, v0);
      upload(b, k1m, k1);
      upload(b, v1m, v1);
      upload(b, qm, q);
      poison(b, om);
      HS_ASSERT_OK(b.begin_step(step.plan));
      HS_ASSERT_OK(b.kv_write(0, k0m.t, v0m.t));
      HS_ASSERT_OK(b.kv_write(1, k1m.t, v1m.t));
      HS_ASSERT_OK(b.attention(1, qm.t, om.t, p));
      HS_ASSERT_OK(b.end_step());
      out[which] = download(b, om);
    }
    // Prompts (300 tokens; 200 on a 1000-token context) run on CUDA's tensor-core flash kernel,
    // which rounds Q and P to the cache's 16-bit type (flash_prefill.h): bf16's 8-bit mantissa
    // needs a looser bound than f16's; decode steps run the exact kernel.
    const bool flash_bf16 = c.dtype == KvDtype::kBF16 && (c.scenario == Scenario::kPrefill ||
                                                          c.scenario == Scenario::kChunked);
    check("attention", attn_name(c), out[1], out[0], flash_bf16 ? 1.5e-2 : 2e-3, flash_bf16 ? 2.5e-2 : 5e-3);
  }
};

TEST_F(AttentionOps, F16AllShapes) {
  for (Scenario sc : {Scenario::kSingle, Scenario::kPrefill, Scenario::kDecode, Scenario::kChunked})
    for (int group : {1, 3, 4, 8})
      for (int hd : {64, 128, 256})
        for (int window : {0, 512}) {
          run_case(AttnCase{sc, group, hd, window, KvDtype::kF16});
          if (HasFatalFailure()) return;
        }
}

TEST_F(AttentionOps, F32AndBf16AndOddGroups) {
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kBF16})
    for (Scenario sc : {Scenario::kSingle, Scenario::kPrefill, Scenario::kDecode, Scenario::kChunked})
      for (int window : {0, 512}) {
        run_case(AttnCase{sc, 4, 128, window, dt});
        if (HasFatalFailure()) return;
      }
  for (int group : {2, 5, 7})  // groups between the kernel's register sizes (1, 2, 4, 8)
    for (Scenario sc : {Scenario::kPrefill, Scenario::kDecode}) {
      run_case(AttnCase{sc, group, 64, 0, KvDtype::kF16});
      if (HasFatalFailure()) return;
    }
}

TEST_F(AttentionOps, Fp8AllShapes) {
  for (Scenario sc : {Scenario::kSingle, Scenario::kPrefill, Scenario::kDecode, Scenario::kChunked})
    for (int group : {1, 3, 4, 8})
      for (int hd : {64, 128, 256})
        for (int window : {0, 512}) {
          run_case(AttnCase{sc, group, hd, window, KvDtype::kFp8});
          if (HasFatalFailure()) return;
        }
  for (int group : {2, 5, 7})
    for (Scenario sc : {Scenario::kPrefill, Scenario::kDecode}) {
      run_case(AttnCase{sc, group, 64, 0, KvDtype::kFp8});
      if (HasFatalFailure()) return;
    }
}

TEST_F(AttentionOps, Int8AndInt4Shapes) {
  for (KvDtype dt : {KvDtype::kInt8, KvDtype::kInt4})
    for (Scenario sc : {Scenario::kSingle, Scenario::kPrefill, Scenario::kDecode, Scenario::kChunked})
      for (int group : {1, 4, 8})
        for (int hd : {64, 128, 256}) {
          run_case(AttnCase{sc, group, hd, sc == Scenario::kDecode ? 512 : 0, dt});
          if (HasFatalFailure()) return;
        }
  for (KvDtype dt : {KvDtype::kInt8, KvDtype::kInt4})
    for (int group : {2, 5, 7}) {
      run_case(AttnCase{Scenario::kDecode, group, 64, 0, dt});
      if (HasFatalFailure()) return;
    }
}

// The tensor-core decode kernel (attention_mma.cu, HS_CUDA_ATTN_MMA) on the same cases as the
// CUDA-core one: f16, int8 and fp8 pages, every head_dim and group it takes (q split into f16 hi
// + lo, P rounded to f16: the same bounds as the exact kernel). Decode steps (one token of each
// of 3 sequences, 1 to 5000 keys: one run and many runs merged) and the one-token step; prompts
// take the flash kernel either way.
TEST_F(AttentionOps, TensorCoreDecodeKernelAsTheCpu) {
#if defined(HS_WITH_CUDA)
  cuda::set_attention_mma(1);
  struct Restore {
    ~Restore() { cuda::set_attention_mma(-1); }
  } restore;
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kFp8})
    for (Scenario sc : {Scenario::kSingle, Scenario::kDecode})
      for (int group : {1, 3, 4, 6, 8})
        for (int hd : {64, 128, 256})
          for (int window : {0, 512}) {
            run_case(AttnCase{sc, group, hd, window, dt});
            if (HasFatalFailure()) return;
          }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// CUDA's scaled kv_write (fp8, int8, int4) gives the bytes KvCache::write gives on the host,
// page for page (rows, f16 scales and padding), for ordinary, outlier, tiny (f16-subnormal
// scale), zero, huge and tie-valued rows; head_dim 64 / 128 / 256 and two that attention does
// not take. (int4's "huge" rows stay finite: f16(min) = -inf makes the host encoder's nibble
// a float-to-int cast of NaN, undefined on both sides.)
TEST_F(BackendOps, ScaledKvWriteMatchesHostBytes) {
#if defined(HS_WITH_CUDA)
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(dev_.get());
  ASSERT_NE(cuda, nullptr);
  constexpr int kLayers = 2, kKvHeads = 3, kP = 16;
  for (KvDtype dtype : {KvDtype::kFp8, KvDtype::kInt8, KvDtype::kInt4})
  for (int hd : {64, 128, 256, 80, 6}) {
    const int kv_dim = kKvHeads * hd;
    const int32_t n = 70;  // tokens 0..69 of one sequence, then 5 more over a second step
    KvCache kv(KvGeometry{kLayers, kKvHeads, hd, kP, dtype}, 9);
    SeqKv seq;
    HS_ASSERT_OK(kv.reserve(seq, n + 5));
    std::shuffle(seq.blocks.begin(), seq.blocks.end(), rng_);  // scattered pages
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    auto rows = [&](int64_t count) {
      std::vector<float> x = normal(rng_, static_cast<size_t>(count * kv_dim), 1.0f, true);
      for (int64_t r = 0; r < count * kKvHeads; ++r) {
        float* row = x.data() + r * hd;
        const int kind = static_cast<int>(r % 7);
        for (int d = 0; d < hd; ++d) {
          switch (kind) {
            case 1: row[d] *= 1e-3f; break;                    // f16-subnormal scale
            case 2: row[d] = 0.0f; break;                      // d = 0
            case 3: row[d] *= dtype == KvDtype::kInt4 ? 3e3f : 3e7f; break;  // fp8: scale clamped to 65504
            case 4:  // d = f16(7 / 448) = 2^-6 exactly, x / d = 4 · (-128..124): many exact ties
              row[d] = d == 0 ? 7.0f : (static_cast<int>(u(rng_) * 64) - 32) * 0x1p-4f;
              break;
            case 5: row[d] = d == 0 ? -448.0f : row[d] * 1e-6f; break;  // one big element, the rest ~0
            default: break;
          }
        }
      }
      return x;
    };
    for (int part = 0; part < 2; ++part) {
      Step step;
      const int32_t first = part == 0 ? 0 : n, count = part == 0 ? n : 5;
      for (int32_t p = first; p < first + count; ++p) {
        step.positions.push_back(p);
        step.seq_index.push_back(0);
      }
      step.seqs = {&seq};
      step.finish(&kv, *pool_);
      const std::vector<float> k0 = rows(count), v0 = rows(count), k1 = rows(count), v1 = rows(count);
      for (int32_t i = 0; i < count; ++i)
        for (int h = 0; h < kKvHeads; ++h) {
          const int64_t off = static_cast<int64_t>(i) * kv_dim + h * hd;
          kv.write(seq, 0, h, first + i, k0.data() + off, v0.data() + off);
          kv.write(seq, 1, h, first + i, k1.data() + off, v1.data() + off);
        }
      Mat k0m = make_mat(*dev_, count, kv_dim), v0m = make_mat(*dev_, count, kv_dim),
          k1m = make_mat(*dev_, count, kv_dim), v1m = make_mat(*dev_, count, kv_dim);
      upload(*dev_, k0m, k0);
      upload(*dev_, v0m, v0);
      upload(*dev_, k1m, k1);
      upload(*dev_, v1m, v1);
      HS_ASSERT_OK(dev_->begin_step(step.plan));
      HS_ASSERT_OK(dev_->kv_write(0, k0m.t, v0m.t));
      HS_ASSERT_OK(dev_->kv_write(1, k1m.t, v1m.t));
      HS_ASSERT_OK(dev_->end_step());
    }
    const size_t layer_bytes = static_cast<size_t>(kv.pool().n_blocks() * kv.geometry().page_bytes());
    for (int l = 0; l < kLayers; ++l) {
      std::vector<uint8_t> got(layer_bytes, 0xcd);
      HS_ASSERT_OK(cuda->read_kv_pages(l, got.data()));
      const uint8_t* want = static_cast<const uint8_t*>(kv.layer_base(l));
      size_t bad = 0, first_bad = 0;
      for (size_t b = 0; b < layer_bytes; ++b)
        if (got[b] != want[b] && bad++ == 0) first_bad = b;
      EXPECT_EQ(bad, 0u) << kv_dtype_name(dtype) << " hd " << hd << " layer " << l << ": " << bad << " of " << layer_bytes
                         << " bytes differ, first at " << first_bad << " (got " << int{got[first_bad]} << ", host "
                         << int{want[first_bad]} << "); " << seed_note();
      print_header();
      std::printf("%-12s %-46s %12zu %12s %10s%s\n", "kv_write",
                  (std::string(kv_dtype_name(dtype)) + " bytes hd" + std::to_string(hd) + " layer " + std::to_string(l))
                      .c_str(),
                  bad, "bytes", "0",
                  bad == 0 ? "" : "  FAIL");
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

TEST_F(BackendOps, RefusesWhatItCannotRun) {
  // Host tensors and weight types it cannot run get clear errors (every KV dtype binds).
  std::vector<float> host(64);
  const Tensor h = Tensor::matrix(host.data(), DType::F32, 1, 64);
  EXPECT_FALSE(dev_->scale(h, 2.0f).is_ok());
  std::vector<uint8_t> q2(84 * 1);
  const auto bad = dev_->prepare_weight(Tensor::matrix(q2.data(), DType::Q2_K, 1, 256), "blk.0.ffn_up.weight");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("blk.0.ffn_up.weight"), std::string::npos) << bad.status().message();
}

#if defined(HS_WITH_CUDA)
// The host fp8 encoder (kv/kv_quant.h) against cuda_fp8.h's conversion (its host path is
// NVIDIA's reference for cvt.rn.satfinite.e4m3x2.f32): every float whose low 16 bits are
// one of a few patterns (every sign, exponent and top-7-mantissa combination: all rounding
// positions, ties included) plus random bit patterns. Needs no device.
TEST(BackendOpsFp8, EncoderMatchesCudaConversion) {
  std::mt19937_64 rng(test_seed());
  auto check_one = [](uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, 4);
    const auto want = static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
    const uint8_t got = fp8_e4m3_from_float(x);
    if (got != want) ADD_FAILURE() << "bits 0x" << std::hex << bits << ": host " << int{got} << ", cuda " << int{want};
    return got == want;
  };
  int64_t bad = 0, n = 0;
  for (uint32_t top = 0; top < (1u << 16); ++top)
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, static_cast<uint32_t>(rng() & 0xffff)}) {
      bad += !check_one(top << 16 | low);
      ++n;
      if (bad > 20) return;
    }
  for (int i = 0; i < 1000000; ++i, ++n) {
    bad += !check_one(static_cast<uint32_t>(rng()));
    if (bad > 20) return;
  }
  // Decoding: every byte as cuda_fp8.h widens it (e4m3 -> f16, exact).
  for (int b = 0; b < 256; ++b) {
    const __half_raw hr = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
    const float want = fp16_to_fp32(hr.x), got = fp8_e4m3_to_float(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      EXPECT_EQ(got, want) << b;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << b;
    }
  }
  std::printf("fp8 encoder vs cuda_fp8.h: %lld floats, %lld differ\n", static_cast<long long>(n),
              static_cast<long long>(bad));
  EXPECT_EQ(bad, 0);
}
#endif

}  // namespace
}  // namespace hs
