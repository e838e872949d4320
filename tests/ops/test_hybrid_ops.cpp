// tests/ops/test_hybrid_ops.cpp — the hybrid (Gated DeltaNet) and mixture-of-experts ops of the
// CUDA backend against the CPU backend (the reference), as tests/ops/test_backend_ops.cpp does
// for the dense ops: conv1d_causal, gated_delta_rule, l2_norm, rms_norm_gated, sigmoid_mul,
// delta_gates, rope_partial, moe_route, moe_experts, add_sigmoid_gated, and the refusals.
//
// Inputs are fresh each run (std::random_device, or HS_TEST_SEED=<n> to replay; the seed is
// printed with every failure). Outputs are poisoned with NaN before each op and every column
// outside an op's view (strided operands: column slices of wider matrices) is compared too, so
// an unwritten output or a write outside the view shows up; a NaN in the reference must stay a
// NaN on the device. The recurrent ops run a scenario over one state tensor of 4 slots: a
// 150-token prefill from position 0 into slot 2 (whose old contents are NaN: a fresh sequence
// must ignore them), its decode step at 150, a 2-token prompt (fewer tokens than the conv
// history), a batch of 3 sequences interleaved in slots 2, 0, 3 (continuing, fresh, a decode
// token) and one back to back (a fresh sequence reusing a slot with a real state, a 66-token
// continuation across the 64-token chunk); slot 1 is never used and must keep its contents.
// DecodeStepsAsGraphs runs a decode body of every per-sequence op through run_step, so the
// CUDA backend captures it once and replays it with new tables (sequence order, positions, a
// fresh sequence). Thresholds by what the backends are allowed to differ in:
//   conv1d_causal: out 1e-5 of max|ref| (same operation order, exp to an ulp); its state holds
//     copies of inputs: exact;
//   gated_delta_rule: out and state 1e-4 relative norm, 5e-4 of max|ref| (the CPU runs a
//     multi-token sequence in the chunked form, the GPU may run the recurrence token by token:
//     the same sums regrouped; the CPU's two forms differ by ~1e-6 relative on these inputs,
//     so the bound leaves room for other summation orders, not for 16-bit or tf32 math);
//   l2_norm, rms_norm_gated, sigmoid_mul, delta_gates (softplus's threshold branch included),
//     rope_partial (double angles, positions to 1e5), add_sigmoid_gated: 1e-5 of max|ref|;
//   moe_route: ids exactly equal (rows with two probabilities within 1e-6 relative near the
//     top-k are skipped; exact ties, planted, must resolve to the lower id), weights within 1e-6
//     relative per element;
//   moe_experts (bf16 / f16 experts, the CPU at MatmulPrecision::kExact): 5e-3 relative norm,
//     1.5e-2 of max|ref| — room for a device that rounds x and the hidden rows to 16 bits
//     (bf16: ~1.6e-3 relative per rounding, two of them); one that keeps f32 lands near 1e-6.
// A compact table (op, shape, max abs error, relative error) goes to stdout for the GPU check
// log. Compiles to nothing without CUDA; skips without a CUDA device.
#if defined(HS_WITH_CUDA)

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "ops_test_util.h"

namespace hs {
namespace {

using ops_test::normal;
using ops_test::seed_note;
using ops_test::test_seed;

#define HS_ASSERT_OK(expr)                                                                    \
  do {                                                                                        \
    const ::hs::Status hs_st_ = (expr);                                                       \
    ASSERT_TRUE(hs_st_.is_ok()) << #expr << ": " << hs_st_.to_string() << "; " << seed_note(); \
  } while (0)

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- comparison and the printed table ----------------------------------------------------

struct Diff {
  double max_abs = 0;  // max |got - ref|
  double max_ref = 0;  // max |ref|
  double rel = 0;      // ||got - ref|| / ||ref||
  int64_t bad = 0;     // non-finite where the reference is finite, or a reference NaN (poison) overwritten
};

Diff compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Diff d;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], g = got[i];
    if (std::isnan(r)) {  // poison / garbage the op must not touch
      if (!std::isnan(g)) ++d.bad;
      continue;
    }
    if (!std::isfinite(g)) {
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

void print_row(const char* op, const std::string& shape, double max_abs, double rel, double tol, bool ok) {
  print_header();
  std::printf("%-12s %-46s %12.3e %12.3e %10.1e%s\n", op, shape.c_str(), max_abs, rel, tol, ok ? "" : "  FAIL");
}

// Checks rel (norm-relative) and max_abs / max_ref against `tol` (max_tol), prints one table row.
void check(const char* op, const std::string& shape, const std::vector<float>& got, const std::vector<float>& ref,
           double tol, double max_tol = -1) {
  ASSERT_EQ(got.size(), ref.size()) << op << " " << shape;
  const Diff d = compare(got, ref);
  const double max_rel = d.max_ref > 0 ? d.max_abs / d.max_ref : d.max_abs;
  if (max_tol < 0) max_tol = tol;
  const bool ok = d.bad == 0 && d.rel <= tol && max_rel <= max_tol;
  print_row(op, shape, d.max_abs, d.rel, tol, ok);
  EXPECT_EQ(d.bad, 0) << op << " " << shape << ": unwritten / non-finite outputs, or writes outside the view; "
                      << seed_note();
  EXPECT_LE(d.rel, tol) << op << " " << shape << "; " << seed_note();
  EXPECT_LE(max_rel, max_tol) << op << " " << shape << " (max abs " << d.max_abs << " of max " << d.max_ref << "); "
                              << seed_note();
}

// A state tensor [slots][slot_floats]: the used slots within tol (max_tol), the `idle` slot, which
// no sequence of the plans names, bit for bit (its contents must survive every step).
void check_state(const char* op, const std::string& shape, const std::vector<float>& got,
                 const std::vector<float>& ref, int64_t slot_floats, int64_t idle, double tol, double max_tol) {
  ASSERT_EQ(got.size(), ref.size()) << op << " " << shape;
  std::vector<float> g_used, r_used, g_idle, r_idle;
  for (int64_t s = 0; s < static_cast<int64_t>(ref.size()) / slot_floats; ++s) {
    auto& gd = s == idle ? g_idle : g_used;
    auto& rd = s == idle ? r_idle : r_used;
    gd.insert(gd.end(), got.begin() + s * slot_floats, got.begin() + (s + 1) * slot_floats);
    rd.insert(rd.end(), ref.begin() + s * slot_floats, ref.begin() + (s + 1) * slot_floats);
  }
  check(op, shape, g_used, r_used, tol, max_tol);
  check(op, shape + " (idle slot)", g_idle, r_idle, 0.0, 0.0);
}

// ---- tensors on a backend ------------------------------------------------------------------

struct Mat {
  Buffer buf;
  Tensor t;
};

Mat make_mat(Backend& b, int64_t rows, int64_t cols, DType type = DType::F32) {
  Mat m;
  auto r = b.alloc(static_cast<size_t>(std::max<int64_t>(1, rows * cols)) * 4, "test tensor");
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (!r.is_ok()) return m;
  m.buf = std::move(*r);
  m.t = Tensor::matrix(m.buf.data(), type, rows, cols, b.device());
  return m;
}

template <typename T>
void upload(Backend& b, const Mat& m, const std::vector<T>& v) {
  ASSERT_EQ(static_cast<int64_t>(v.size() * sizeof(T)), m.t.rows * m.t.row_bytes());
  HS_ASSERT_OK(b.from_host(v.data(), m.t));
}

void poison(Backend& b, const Mat& m) {
  upload(b, m, std::vector<float>(static_cast<size_t>(m.t.rows * m.t.cols), kNaN));
}

template <typename T = float>
std::vector<T> download(Backend& b, const Mat& m) {
  std::vector<T> v(static_cast<size_t>(m.t.rows * m.t.row_bytes()) / sizeof(T));
  const Status st = b.to_host(m.t, v.data());
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return v;
}

// Columns [col, col + cols) of every row of an f32 matrix: a strided view.
Tensor col_slice(const Tensor& t, int64_t col, int64_t cols) {
  Tensor s = t;
  s.data = t.f32() + col;
  s.cols = cols;
  return s;
}

std::vector<float> uniform(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// src [rows][cols] into columns [col, col + cols) of dst [rows][width].
void put_cols(const std::vector<float>& src, int64_t rows, int64_t cols, std::vector<float>& dst, int64_t width,
              int64_t col) {
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(src.data() + r * cols, cols, dst.data() + r * width + col);
}

// x [rows][heads * hd] <- each head L2-normalised, times scale (what l2_norm gives the delta rule).
void l2_normalize_heads(std::vector<float>& x, int64_t hd, float scale) {
  for (size_t h = 0; h + static_cast<size_t>(hd) <= x.size(); h += static_cast<size_t>(hd)) {
    double ss = 0;
    for (int64_t i = 0; i < hd; ++i) ss += static_cast<double>(x[h + i]) * x[h + i];
    const double inv = 1.0 / std::sqrt(ss + 1e-6);
    for (int64_t i = 0; i < hd; ++i) x[h + i] = static_cast<float>(x[h + i] * inv * scale);
  }
}

// The delta rule's inputs for n tokens: q, k L2-normalised per k-head (q scaled by 1/sqrt(k_dim),
// as the decoder does), v ~ N(0, 1), g = log decays in [-1, -0.01], beta in (0, 1).
struct DeltaInputs {
  std::vector<float> q, k, v, g, beta;
};

DeltaInputs delta_inputs(std::mt19937_64& rng, int64_t n, const DeltaRuleParams& dp) {
  const int64_t qk = int64_t{dp.n_k_heads} * dp.k_dim, vw = int64_t{dp.n_v_heads} * dp.v_dim;
  DeltaInputs in;
  in.q = normal(rng, static_cast<size_t>(n * qk));
  in.k = normal(rng, static_cast<size_t>(n * qk));
  l2_normalize_heads(in.q, dp.k_dim, 1.0f / std::sqrt(static_cast<float>(dp.k_dim)));
  l2_normalize_heads(in.k, dp.k_dim, 1.0f);
  in.v = normal(rng, static_cast<size_t>(n * vw));
  in.g = uniform(rng, static_cast<size_t>(n * dp.n_v_heads), -1.0f, -0.01f);
  in.beta = uniform(rng, static_cast<size_t>(n * dp.n_v_heads), 0.0f, 1.0f);
  return in;
}

// Random 16-bit weight bytes [rows][cols] (bf16 or f16), N(0, 1 / cols).
std::vector<uint8_t> random_16bit(DType type, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const float sd = 1.0f / std::sqrt(static_cast<float>(cols));
  const std::vector<float> v = normal(rng, static_cast<size_t>(rows * cols), sd);
  std::vector<uint8_t> w(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = type == DType::BF16 ? fp32_to_bf16(v[i]) : fp32_to_fp16(v[i]);
    std::memcpy(&w[2 * i], &h, 2);
  }
  return w;
}

// ---- plans -----------------------------------------------------------------------------------

// A sequence's tokens in a step: positions [pos, pos + count), recurrent state in `slot`.
struct SeqPart {
  int32_t slot, pos, count;
};

// A step over tokens of the given sequences; owns every array the plan's spans point into.
struct Step {
  std::vector<int32_t> tokens, positions, seq_index;
  std::vector<SeqKv> kv;  // no pages: these ops read no KV
  std::vector<SeqKv*> seqs;
  ForwardPlan plan;
};

// The sequences' tokens back to back (batch order = plan order) or interleaved round-robin.
std::unique_ptr<Step> make_step(const std::vector<SeqPart>& parts, bool interleave, ThreadPool& pool) {
  auto s = std::make_unique<Step>();
  const size_t n_seqs = parts.size();
  s->kv.resize(n_seqs);
  for (auto& k : s->kv) s->seqs.push_back(&k);
  auto push = [&](size_t j, int32_t i) {
    s->positions.push_back(parts[j].pos + i);
    s->seq_index.push_back(static_cast<int32_t>(j));
  };
  if (interleave) {
    int32_t longest = 0;
    for (const SeqPart& p : parts) longest = std::max(longest, p.count);
    for (int32_t i = 0; i < longest; ++i)
      for (size_t j = 0; j < n_seqs; ++j)
        if (i < parts[j].count) push(j, i);
  } else {
    for (size_t j = 0; j < n_seqs; ++j)
      for (int32_t i = 0; i < parts[j].count; ++i) push(j, i);
  }
  s->tokens.assign(s->positions.size(), 0);
  ForwardPlan& p = s->plan;
  p.tokens = s->tokens;
  p.positions = s->positions;
  p.seq_index = s->seq_index;
  p.seqs = s->seqs;
  p.pool = &pool;
  for (const SeqPart& part : parts) {
    p.seq_tokens.push_back(part.count);
    p.state_slots.push_back(part.slot);
  }
  p.page_indptr.assign(n_seqs + 1, 0);
  for (int32_t pos : s->positions) p.max_kv_len = std::max(p.max_kv_len, pos + 1);
  return s;
}

// n tokens at `positions`, no sequences (the stateless ops).
std::unique_ptr<Step> plain_step(std::vector<int32_t> positions, ThreadPool& pool) {
  auto s = std::make_unique<Step>();
  s->positions = std::move(positions);
  s->tokens.assign(s->positions.size(), 0);
  s->plan.tokens = s->tokens;
  s->plan.positions = s->positions;
  s->plan.pool = &pool;
  for (int32_t pos : s->positions) s->plan.max_kv_len = std::max(s->plan.max_kv_len, pos + 1);
  return s;
}

std::unique_ptr<Step> rows_step(int64_t n, ThreadPool& pool) {
  return plain_step(std::vector<int32_t>(static_cast<size_t>(n), 0), pool);
}

// The recurrent ops' scenario over a state tensor of kSlots slots (see the header).
constexpr int64_t kSlots = 4;

struct ScenarioStep {
  const char* what;
  std::vector<SeqPart> parts;
  bool interleave;
};

const std::vector<ScenarioStep>& scenario() {
  static const std::vector<ScenarioStep> s = {
      {"prefill 150@0 s2", {{2, 0, 150}}, false},
      {"decode @150 s2", {{2, 150, 1}}, false},
      {"prompt 2@0 s3", {{3, 0, 2}}, false},
      {"mixed 3@151 s2, 70@0 s0, 1@2 s3", {{2, 151, 3}, {0, 0, 70}, {3, 2, 1}}, true},
      {"seq 1@70 s0, 3@0 s3 (reused), 66@154 s2", {{0, 70, 1}, {3, 0, 3}, {2, 154, 66}}, false},
  };
  return s;
}

// A state tensor before the first step: NaN in the slots (whose first use is fresh: the op must
// not read them), N(0, 1) in the `idle` one, which no step uses (scenario(): slot 1).
std::vector<float> initial_state(int64_t slot_floats, int64_t idle, std::mt19937_64& rng) {
  std::vector<float> st(static_cast<size_t>(kSlots * slot_floats), kNaN);
  const std::vector<float> g = normal(rng, static_cast<size_t>(slot_floats));
  std::copy(g.begin(), g.end(), st.begin() + idle * slot_floats);
  return st;
}

std::string dims(int64_t r, int64_t c) { return "[" + std::to_string(r) + "][" + std::to_string(c) + "]"; }

// ---- the fixture -------------------------------------------------------------------------------

class HybridOps : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dev = make_backend(Device::kCuda);
    if (!dev.is_ok()) GTEST_SKIP() << "no CUDA backend: " << dev.status().message();
    dev_ = std::move(*dev);
    auto cpu = make_backend(Device::kCpu);
    ASSERT_TRUE(cpu.is_ok()) << cpu.status().to_string();
    cpu_ = std::move(*cpu);
    cpu_->set_matmul_precision(MatmulPrecision::kExact);  // the float reference (moe_experts)
    pool_ = std::make_unique<ThreadPool>(0);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^ std::hash<std::string>{}(info->name()));
    static bool announced = false;
    if (!announced) {
      announced = true;
      std::printf("hybrid ops: %s vs %s, %s\n", dev_->name().c_str(), cpu_->name().c_str(), seed_note().c_str());
    }
  }
  void TearDown() override {
    // Buffers must die before their backend.
    cpu_.reset();
    dev_.reset();
  }

  Backend& backend(int which) { return which == 0 ? *cpu_ : *dev_; }

  // An element-wise / row op on fresh tensors of both backends: `ins` are uploaded, `outs`
  // (shapes) poisoned, `op` runs inside a step of `plan`; returns each backend's outputs, then
  // its inputs (in-place ops write them).
  template <typename Op>
  void run_both(const ForwardPlan& plan, const std::vector<std::pair<std::vector<int64_t>, std::vector<float>>>& ins,
                const std::vector<std::vector<int64_t>>& outs, Op op, std::vector<std::vector<float>>& ref,
                std::vector<std::vector<float>>& got) {
    for (int which = 0; which < 2; ++which) {
      Backend& b = backend(which);
      std::vector<Mat> in_m, out_m;
      for (const auto& [shape, data] : ins) {
        in_m.push_back(make_mat(b, shape[0], shape[1]));
        upload(b, in_m.back(), data);
      }
      for (const auto& shape : outs) {
        out_m.push_back(make_mat(b, shape[0], shape[1]));
        poison(b, out_m.back());
      }
      if (::testing::Test::HasFatalFailure()) return;
      HS_ASSERT_OK(b.begin_step(plan));
      std::vector<Tensor> it, ot;
      for (auto& m : in_m) it.push_back(m.t);
      for (auto& m : out_m) ot.push_back(m.t);
      const Status st = op(b, which, it, ot);
      const Status end = b.end_step();
      HS_ASSERT_OK(st);
      HS_ASSERT_OK(end);
      auto& dst = which == 0 ? ref : got;
      dst.clear();
      for (auto& m : out_m) dst.push_back(download(b, m));
      for (auto& m : in_m) dst.push_back(download(b, m));
    }
  }

  // A small f32 vector on both backends (the CPU's view of a kept host copy, the device's copy).
  void prepare_both(std::vector<float> v, Tensor (&out)[2]) {
    kept_f_.push_back(std::move(v));
    for (int which = 0; which < 2; ++which) {
      auto r = backend(which).prepare_vector(kept_f_.back(), "test.vector");
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      out[which] = *r;
    }
  }

  // A 16-bit weight on both backends; the host bytes stay alive for the whole test
  // (prepare_weight may cache by host address, and the CPU keeps a view).
  void prepare_weight_both(DType type, int64_t rows, int64_t cols, const char* name, Tensor (&out)[2]) {
    kept_.push_back(random_16bit(type, rows, cols, rng_));
    const Tensor host = Tensor::matrix(kept_.back().data(), type, rows, cols);
    for (int which = 0; which < 2; ++which) {
      auto r = backend(which).prepare_weight(host, name);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      out[which] = *r;
    }
  }

  std::unique_ptr<Backend> cpu_, dev_;
  std::unique_ptr<ThreadPool> pool_;
  std::mt19937_64 rng_;
  std::deque<std::vector<uint8_t>> kept_;
  std::deque<std::vector<float>> kept_f_;
};

// ---- the recurrent ops ---------------------------------------------------------------------------

TEST_F(HybridOps, Conv1dCausal) {
  struct Case {
    int64_t channels;
    int kernel;
    int64_t x_width, x_col, out_width, out_col;  // x, out: columns [col, col + channels) of rows of width
  };
  const Case cases[] = {
      {96, 4, 96, 0, 96, 0},                   // contiguous
      {1024, 4, 1024 + 96, 64, 1024 + 32, 0},  // x: the conv channels of a wider in-projection
      {100, 2, 107, 3, 105, 5},                // odd widths and offsets, a 2-tap kernel
  };
  for (const Case& c : cases) {
    const int64_t C = c.channels, K = c.kernel, slot_floats = (K - 1) * C;
    Tensor w[2];
    prepare_both(normal(rng_, static_cast<size_t>(C * K), 0.5f), w);
    if (HasFatalFailure()) return;
    const std::vector<float> st0 = initial_state(slot_floats, 1, rng_);
    Mat state[2];
    for (int which = 0; which < 2; ++which) {
      state[which] = make_mat(backend(which), kSlots, slot_floats);
      upload(backend(which), state[which], st0);
    }
    if (HasFatalFailure()) return;
    const std::string shape = "C" + std::to_string(C) + " K" + std::to_string(K) +
                              (c.x_width != C || c.out_width != C ? " strided " : " ");
    for (const ScenarioStep& sc : scenario()) {
      const auto step = make_step(sc.parts, sc.interleave, *pool_);
      const int64_t n = step->plan.n_tokens();
      const std::vector<float> x = normal(rng_, static_cast<size_t>(n * c.x_width), 1.0f, true);
      std::vector<float> out[2], st[2];
      for (int which = 0; which < 2; ++which) {
        Backend& b = backend(which);
        Mat xm = make_mat(b, n, c.x_width), om = make_mat(b, n, c.out_width);
        upload(b, xm, x);
        poison(b, om);
        if (HasFatalFailure()) return;
        HS_ASSERT_OK(b.begin_step(step->plan));
        const Status op = b.conv1d_causal(col_slice(xm.t, c.x_col, C), w[which], c.kernel, state[which].t,
                                          col_slice(om.t, c.out_col, C));
        const Status end = b.end_step();
        HS_ASSERT_OK(op);
        HS_ASSERT_OK(end);
        out[which] = download(b, om);
        st[which] = download(b, state[which]);
      }
      check("conv1d", shape + sc.what, out[1], out[0], 1e-5);
      check_state("conv1d st", shape + sc.what, st[1], st[0], slot_floats, 1, 0.0, 0.0);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(HybridOps, GatedDeltaRule) {
  struct Case {
    int nk, nv, dk, dv;
    bool tiled, strided;  // strided: q | k | v column slices of one matrix, g | beta of another, out padded
    bool prologue = false;  // raw q, k, g, beta with a DeltaPrologue (the CPU: l2_norm + delta_gates first)
  };
  const Case cases[] = {
      {2, 4, 128, 128, true, false},
      {2, 4, 128, 128, false, true},
      {2, 6, 16, 32, false, true},
      {2, 6, 16, 32, true, false},
      {2, 4, 128, 128, true, false, true},
      {2, 6, 64, 48, false, true, true},
      {1, 2, 256, 40, true, false, true},
  };
  for (const Case& c : cases) {
    DeltaRuleParams dp{c.nk, c.nv, c.dk, c.dv, c.tiled};
    Tensor ssm_a[2], dt_bias[2];
    DeltaPrologue pro[2];
    if (c.prologue) {
      std::vector<float> a = uniform(rng_, static_cast<size_t>(c.nv), -1.0f, 1.0f);
      for (float& x : a) x = -std::exp(x);  // -exp(A_log), as the loader stores it
      prepare_both(a, ssm_a);
      prepare_both(normal(rng_, static_cast<size_t>(c.nv)), dt_bias);
      if (HasFatalFailure()) return;
      for (int which = 0; which < 2; ++which)
        pro[which] = DeltaPrologue{1e-6f, 1.0f / std::sqrt(static_cast<float>(c.dk)), ssm_a[which], dt_bias[which]};
    }
    const int64_t qk = int64_t{c.nk} * c.dk, vw = int64_t{c.nv} * c.dv, nv = c.nv;
    const int64_t slot_floats = vw * c.dk;
    // Where each operand lives: (host matrix, first column); matrix widths.
    struct Where {
      size_t mat;
      int64_t col;
    };
    std::vector<int64_t> widths;
    Where wq{}, wk{}, wv{}, wg{}, wb{};
    int64_t out_width = vw, out_col = 0;
    if (c.strided) {
      widths = {2 * qk + vw + 8, 2 * nv + 3};
      wq = {0, 0};
      wk = {0, qk};
      wv = {0, 2 * qk};
      wg = {1, 3};
      wb = {1, 3 + nv};
      out_width = vw + 16;
      out_col = 16;
    } else {
      widths = {qk, qk, vw, nv, nv};
      wq = {0, 0};
      wk = {1, 0};
      wv = {2, 0};
      wg = {3, 0};
      wb = {4, 0};
    }
    const std::vector<float> st0 = initial_state(slot_floats, 1, rng_);
    Mat state[2];
    for (int which = 0; which < 2; ++which) {
      state[which] = make_mat(backend(which), kSlots, slot_floats);
      upload(backend(which), state[which], st0);
    }
    if (HasFatalFailure()) return;
    const std::string shape = "k" + std::to_string(c.nk) + "x" + std::to_string(c.dk) + " v" + std::to_string(c.nv) +
                              "x" + std::to_string(c.dv) + (c.tiled ? " tiled" : " grouped") +
                              (c.strided ? " strided" : "") + (c.prologue ? " prologue " : " ");
    for (const ScenarioStep& sc : scenario()) {
      const auto step = make_step(sc.parts, sc.interleave, *pool_);
      const int64_t n = step->plan.n_tokens();
      DeltaInputs in = delta_inputs(rng_, n, dp);
      if (c.prologue) {  // raw: the projections' outputs before the norms and gates
        const int64_t qkn = static_cast<int64_t>(in.q.size());
        in.q = normal(rng_, static_cast<size_t>(qkn), 2.0f);
        in.k = normal(rng_, static_cast<size_t>(qkn), 0.5f);
        in.g = normal(rng_, in.g.size(), 2.0f);
        in.beta = normal(rng_, in.beta.size(), 2.0f);
      }
      std::vector<std::vector<float>> hosts;
      for (int64_t wd : widths) hosts.push_back(normal(rng_, static_cast<size_t>(n * wd)));
      put_cols(in.q, n, qk, hosts[wq.mat], widths[wq.mat], wq.col);
      put_cols(in.k, n, qk, hosts[wk.mat], widths[wk.mat], wk.col);
      put_cols(in.v, n, vw, hosts[wv.mat], widths[wv.mat], wv.col);
      put_cols(in.g, n, nv, hosts[wg.mat], widths[wg.mat], wg.col);
      put_cols(in.beta, n, nv, hosts[wb.mat], widths[wb.mat], wb.col);
      std::vector<float> out[2], st[2];
      for (int which = 0; which < 2; ++which) {
        Backend& b = backend(which);
        std::vector<Mat> mats;
        for (size_t m = 0; m < widths.size(); ++m) {
          mats.push_back(make_mat(b, n, widths[m]));
          upload(b, mats.back(), hosts[m]);
        }
        Mat om = make_mat(b, n, out_width);
        poison(b, om);
        if (HasFatalFailure()) return;
        auto view = [&](const Where& w, int64_t cols) { return col_slice(mats[w.mat].t, w.col, cols); };
        HS_ASSERT_OK(b.begin_step(step->plan));
        dp.prologue = c.prologue ? &pro[which] : nullptr;
        const Status op = b.gated_delta_rule(view(wq, qk), view(wk, qk), view(wv, vw), view(wg, nv), view(wb, nv),
                                             state[which].t, col_slice(om.t, out_col, vw), dp);
        const Status end = b.end_step();
        HS_ASSERT_OK(op);
        HS_ASSERT_OK(end);
        out[which] = download(b, om);
        st[which] = download(b, state[which]);
      }
      check("delta", shape + sc.what, out[1], out[0], 1e-4, 5e-4);
      check_state("delta st", shape + sc.what, st[1], st[0], slot_floats, 1, 1e-4, 5e-4);
      if (HasFatalFailure()) return;
    }
  }
}

// A hybrid layer's decode body (conv, delta rule, partial RoPE, router, experts) through
// run_step: the CUDA backend runs the first decode step eagerly, captures the second and replays
// the rest, reading each step's tables (the plan's sequence order rotates, positions advance, and
// at step 5 a new one-token sequence takes slot 0: fresh, its slot's state ignored) from its
// fixed buffers. Every step against the CPU's.
TEST_F(HybridOps, DecodeStepsAsGraphs) {
  constexpr int64_t C = 96;
  constexpr int K = 4;
  const DeltaRuleParams dp{2, 4, 64, 64, false};
  const int64_t qk = 2 * 64, vw = 4 * 64, nv = 4, dsf = vw * 64;
  constexpr int hd = 256, rot = 64;
  constexpr int64_t rw = 2 * hd;
  const MoeParams mp{8, 2, true};
  constexpr int64_t H = 64, F = 32;
  Tensor cw[2], gate[2], up[2], down[2];
  prepare_both(normal(rng_, static_cast<size_t>(C * K), 0.5f), cw);
  prepare_weight_both(DType::BF16, mp.n_experts * F, H, "blk.0.ffn_gate_exps.weight", gate);
  prepare_weight_both(DType::BF16, mp.n_experts * F, H, "blk.0.ffn_up_exps.weight", up);
  prepare_weight_both(DType::BF16, mp.n_experts * H, F, "blk.0.ffn_down_exps.weight", down);
  if (HasFatalFailure()) return;

  // Every buffer allocated before the first step (an allocation would keep the graph from replaying).
  struct Bufs {
    Mat x, xo, q, k, v, g, beta, o, r, logits, ids, w, mx, mo;
  };
  const std::vector<SeqPart> prompts = {{1, 0, 5}, {3, 0, 9}, {0, 0, 3}};
  const int64_t n_prompt = 17, n_dec = 3;
  Bufs bufs[2][2];  // [backend][prompt, decode]
  Mat cstate[2], dstate[2];
  const std::vector<float> cst0 = initial_state(3 * C, 2, rng_), dst0 = initial_state(dsf, 2, rng_);
  for (int which = 0; which < 2; ++which) {
    Backend& b = backend(which);
    for (int phase = 0; phase < 2; ++phase) {
      const int64_t n = phase == 0 ? n_prompt : n_dec;
      Bufs& u = bufs[which][phase];
      for (auto [m, cols] : {std::pair<Mat*, int64_t>{&u.x, C}, {&u.xo, C}, {&u.q, qk}, {&u.k, qk}, {&u.v, vw},
                             {&u.g, nv}, {&u.beta, nv}, {&u.o, vw}, {&u.r, rw}, {&u.logits, mp.n_experts},
                             {&u.w, mp.n_used}, {&u.mx, H}, {&u.mo, H}})
        *m = make_mat(b, n, cols);
      u.ids = make_mat(b, n, mp.n_used, DType::I32);
    }
    cstate[which] = make_mat(b, kSlots, 3 * C);
    dstate[which] = make_mat(b, kSlots, dsf);
    upload(b, cstate[which], cst0);
    upload(b, dstate[which], dst0);
  }
  if (HasFatalFailure()) return;

  struct Seq {
    int32_t slot, pos;
  };
  std::vector<Seq> seqs = {{1, 5}, {3, 9}, {0, 3}};
  for (int t = -1; t < 8; ++t) {  // -1: the prompts
    std::unique_ptr<Step> step;
    if (t < 0) {
      step = make_step(prompts, true, *pool_);
    } else {
      if (t == 5) seqs[2] = {0, 0};
      std::vector<SeqPart> parts;
      for (int j = 0; j < 3; ++j) parts.push_back({seqs[(j + t) % 3].slot, seqs[(j + t) % 3].pos, 1});
      step = make_step(parts, false, *pool_);
    }
    const int64_t n = step->plan.n_tokens();
    const int phase = t < 0 ? 0 : 1;
    const DeltaInputs in = delta_inputs(rng_, n, dp);
    const std::vector<float> x = normal(rng_, static_cast<size_t>(n * C), 1.0f, true),
                             r = normal(rng_, static_cast<size_t>(n * rw)),
                             logits = normal(rng_, static_cast<size_t>(n * mp.n_experts), 2.0f),
                             mx = normal(rng_, static_cast<size_t>(n * H));
    std::vector<std::vector<float>> res[2];  // xo, cstate, o, dstate, r, w, mo
    std::vector<int32_t> ids[2];
    for (int which = 0; which < 2; ++which) {
      Backend& b = backend(which);
      Bufs& u = bufs[which][phase];
      for (auto [m, data] : {std::pair<Mat*, const std::vector<float>*>{&u.x, &x}, {&u.q, &in.q}, {&u.k, &in.k},
                             {&u.v, &in.v}, {&u.g, &in.g}, {&u.beta, &in.beta}, {&u.r, &r}, {&u.logits, &logits},
                             {&u.mx, &mx}})
        upload(b, *m, *data);
      for (Mat* m : {&u.xo, &u.o, &u.mo}) poison(b, *m);
      if (HasFatalFailure()) return;
      HS_ASSERT_OK(b.begin_step(step->plan));
      const Status st = b.run_step([&]() -> Status {
        HS_RETURN_IF_ERROR(b.conv1d_causal(u.x.t, cw[which], K, cstate[which].t, u.xo.t));
        HS_RETURN_IF_ERROR(b.gated_delta_rule(u.q.t, u.k.t, u.v.t, u.g.t, u.beta.t, dstate[which].t, u.o.t, dp));
        HS_RETURN_IF_ERROR(b.rope_partial(u.r.t, hd, rot, 10000000.0f, true));
        HS_RETURN_IF_ERROR(b.moe_route(u.logits.t, u.ids.t, u.w.t, mp));
        return b.moe_experts(u.mx.t, gate[which], up[which], down[which], u.ids.t, u.w.t, u.mo.t, mp);
      });
      const Status end = b.end_step();
      HS_ASSERT_OK(st);
      HS_ASSERT_OK(end);
      res[which] = {download(b, u.xo), download(b, cstate[which]), download(b, u.o), download(b, dstate[which]),
                    download(b, u.r), download(b, u.w), download(b, u.mo)};
      ids[which] = download<int32_t>(b, u.ids);
    }
    const std::string what = t < 0 ? "prompts 5+9+3" : "decode " + std::to_string(t) + " of 3 seqs";
    check("conv1d", what, res[1][0], res[0][0], 1e-5);
    check_state("conv1d st", what, res[1][1], res[0][1], 3 * C, 2, 0.0, 0.0);
    check("delta", what, res[1][2], res[0][2], 1e-4, 5e-4);
    check_state("delta st", what, res[1][3], res[0][3], dsf, 2, 1e-4, 5e-4);
    check("rope_part", what, res[1][4], res[0][4], 1e-5);
    EXPECT_EQ(ids[1], ids[0]) << "moe_route ids, " << what << "; " << seed_note();
    check("moe_route w", what, res[1][5], res[0][5], 1e-6);
    check("moe_experts", what, res[1][6], res[0][6], 5e-3, 1.5e-2);
    if (HasFatalFailure()) return;
    if (t >= 0)
      for (Seq& s : seqs) ++s.pos;
  }
}

// ---- the stateless ops ---------------------------------------------------------------------------

TEST_F(HybridOps, L2Norm) {
  struct Case {
    int hd, heads;
    float scale;
    int64_t width, col;  // the heads are columns [col, col + heads * hd) of rows of `width`
  };
  const Case cases[] = {
      {128, 4, 1.0f / std::sqrt(128.0f), 512, 0},  // q of a delta layer (scaled)
      {16, 6, 1.0f, 96, 0},
      {128, 2, 0.5f, 128 + 256 + 64, 128},  // k inside the conv output
  };
  std::uniform_int_distribution<int64_t> rows_d(1, 40);
  for (const Case& c : cases) {
    const int64_t rows = rows_d(rng_), cols = int64_t{c.heads} * c.hd;
    std::vector<float> x = normal(rng_, static_cast<size_t>(rows * c.width), 3.0f, true);
    std::fill_n(x.begin() + c.col, c.hd, 0.0f);  // an all-zero head: rsqrt(eps) times 0
    const auto step = rows_step(rows, *pool_);
    std::vector<std::vector<float>> ref, got;
    run_both(step->plan, {{{rows, c.width}, x}}, {},
             [&](Backend& b, int, std::vector<Tensor>& in, std::vector<Tensor>&) {
               return b.l2_norm(col_slice(in[0], c.col, cols), c.hd, 1e-6f, c.scale);
             },
             ref, got);
    if (HasFatalFailure()) return;
    check("l2_norm", dims(rows, c.width) + " cols " + std::to_string(c.col) + "+" + std::to_string(c.heads) + "x" +
                         std::to_string(c.hd) + " scale " + std::to_string(c.scale),
          got[0], ref[0], 1e-5);
  }
}

TEST_F(HybridOps, RmsNormGated) {
  struct Case {
    int hd, heads;
    int64_t z_width, z_col;  // z: columns [z_col, z_col + heads * hd) of rows of z_width
  };
  const Case cases[] = {{128, 4, 512, 0}, {64, 3, 192 + 100, 100}, {128, 1, 128, 0}};
  std::uniform_int_distribution<int64_t> rows_d(1, 40);
  for (const Case& c : cases) {
    const int64_t rows = rows_d(rng_), cols = int64_t{c.heads} * c.hd;
    Tensor w[2];
    prepare_both(normal(rng_, static_cast<size_t>(c.hd), 1.0f), w);
    if (HasFatalFailure()) return;
    const auto step = rows_step(rows, *pool_);
    std::vector<std::vector<float>> ref, got;
    run_both(step->plan,
             {{{rows, cols}, normal(rng_, static_cast<size_t>(rows * cols), 2.0f, true)},
              {{rows, c.z_width}, normal(rng_, static_cast<size_t>(rows * c.z_width), 3.0f)}},
             {{rows, cols}},
             [&](Backend& b, int which, std::vector<Tensor>& in, std::vector<Tensor>& out) {
               return b.rms_norm_gated(in[0], col_slice(in[1], c.z_col, cols), w[which], 1e-6f, out[0]);
             },
             ref, got);
    if (HasFatalFailure()) return;
    check("rms_gated", dims(rows, cols) + " w[" + std::to_string(c.hd) + "]" + (c.z_col ? " z strided" : ""), got[0],
          ref[0], 1e-5);
  }
}

TEST_F(HybridOps, SigmoidMul) {
  struct Case {
    int64_t rows, cols, gate_width, gate_col;
  };
  const Case cases[] = {{7, 4096, 4096, 0}, {33, 1000, 2000, 1000}, {1, 96, 96, 0}};  // 2000: q | gate rows
  for (const Case& c : cases) {
    const auto step = rows_step(c.rows, *pool_);
    std::vector<std::vector<float>> ref, got;
    run_both(step->plan,
             {{{c.rows, c.cols}, normal(rng_, static_cast<size_t>(c.rows * c.cols), 1.0f, true)},
              {{c.rows, c.gate_width}, normal(rng_, static_cast<size_t>(c.rows * c.gate_width), 4.0f)}},
             {},
             [&](Backend& b, int, std::vector<Tensor>& in, std::vector<Tensor>&) {
               return b.sigmoid_mul(in[0], col_slice(in[1], c.gate_col, c.cols));
             },
             ref, got);
    if (HasFatalFailure()) return;
    check("sigmoid_mul", dims(c.rows, c.cols) + (c.gate_col ? " gate strided" : ""), got[0], ref[0], 1e-5);
  }
}

TEST_F(HybridOps, DeltaGates) {
  struct Case {
    int64_t rows, nv;
    bool strided;  // b and a column slices of one [rows][2 nv + 6] matrix (b at 2, a at nv + 4)
  };
  const Case cases[] = {{9, 32, false}, {40, 48, true}, {1, 16, false}};
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (const Case& c : cases) {
    const std::vector<float> dt_bias = normal(rng_, static_cast<size_t>(c.nv));
    std::vector<float> ssm_a = normal(rng_, static_cast<size_t>(c.nv));
    for (float& v : ssm_a) v = -std::exp(v);  // -exp(A_log), as the GGUF stores it
    Tensor ta[2], tb[2];
    prepare_both(ssm_a, ta);
    prepare_both(dt_bias, tb);
    if (HasFatalFailure()) return;
    std::vector<float> a = normal(rng_, static_cast<size_t>(c.rows * c.nv), 3.0f);
    // Softplus's branches: x = a + dt_bias far above 20, at it, far below.
    for (int64_t i = 0; i < c.rows * c.nv; ++i) {
      const float pick = u(rng_), bias = dt_bias[static_cast<size_t>(i % c.nv)];
      if (pick < 0.15f) a[static_cast<size_t>(i)] = 20.0f + 20.0f * u(rng_) - bias;
      else if (pick < 0.25f) a[static_cast<size_t>(i)] = 20.0f + (u(rng_) - 0.5f) * 1e-3f - bias;
      else if (pick < 0.3f) a[static_cast<size_t>(i)] = -40.0f * u(rng_) - bias;
    }
    const std::vector<float> b = normal(rng_, static_cast<size_t>(c.rows * c.nv), 4.0f);
    const auto step = rows_step(c.rows, *pool_);
    std::vector<std::vector<float>> ref, got;
    if (c.strided) {
      const int64_t width = 2 * c.nv + 6;
      std::vector<float> ab = normal(rng_, static_cast<size_t>(c.rows * width));
      put_cols(b, c.rows, c.nv, ab, width, 2);
      put_cols(a, c.rows, c.nv, ab, width, c.nv + 4);
      run_both(step->plan, {{{c.rows, width}, ab}}, {},
               [&](Backend& be, int which, std::vector<Tensor>& in, std::vector<Tensor>&) {
                 return be.delta_gates(col_slice(in[0], c.nv + 4, c.nv), col_slice(in[0], 2, c.nv), ta[which],
                                       tb[which]);
               },
               ref, got);
      if (HasFatalFailure()) return;
      check("delta_gates", dims(c.rows, c.nv) + " a, b strided", got[0], ref[0], 1e-5);
    } else {
      run_both(step->plan, {{{c.rows, c.nv}, a}, {{c.rows, c.nv}, b}}, {},
               [&](Backend& be, int which, std::vector<Tensor>& in, std::vector<Tensor>&) {
                 return be.delta_gates(in[0], in[1], ta[which], tb[which]);
               },
               ref, got);
      if (HasFatalFailure()) return;
      check("delta_gates", dims(c.rows, c.nv) + " a", got[0], ref[0], 1e-5);
      check("delta_gates", dims(c.rows, c.nv) + " b", got[1], ref[1], 1e-5);
    }
  }
}

TEST_F(HybridOps, RopePartial) {
  const std::vector<int32_t> positions = {0, 1, 17, 4095, 65537, 100000, 3};
  const int64_t n = static_cast<int64_t>(positions.size());
  struct Case {
    int hd, rot;
    bool neox;
    float theta;
    int heads;
  };
  const Case cases[] = {
      {256, 64, true, 10000000.0f, 3},  // Qwen3.5 / Qwen3-Next attention
      {128, 32, false, 10000.0f, 4},
      {64, 64, true, 10000.0f, 2},  // rot_dims == head_dim: plain rope
  };
  for (const Case& c : cases) {
    for (bool strided : {false, true}) {
      if (strided && c.rot == c.hd) continue;
      const int64_t cols = int64_t{c.heads} * c.hd, col = strided ? 8 : 0, width = cols + (strided ? 12 : 0);
      const auto step = plain_step(positions, *pool_);
      std::vector<std::vector<float>> ref, got;
      run_both(step->plan, {{{n, width}, normal(rng_, static_cast<size_t>(n * width))}}, {},
               [&](Backend& b, int, std::vector<Tensor>& in, std::vector<Tensor>&) {
                 return b.rope_partial(col_slice(in[0], col, cols), c.hd, c.rot, c.theta, c.neox);
               },
               ref, got);
      if (HasFatalFailure()) return;
      check("rope_part", dims(n, cols) + " hd " + std::to_string(c.hd) + " rot " + std::to_string(c.rot) +
                             (c.neox ? " neox" : " pairs") + (strided ? " strided" : "") + " pos<=1e5",
            got[0], ref[0], 1e-5);
    }
  }
}

// ---- mixture of experts ----------------------------------------------------------------------------

TEST_F(HybridOps, MoeRoute) {
  const int64_t n = 37;
  for (int E : {4, 64, 512}) {
    for (int k : {2, 8, 10}) {
      if (k > E) continue;
      for (bool norm : {true, false}) {
        const MoeParams mp{E, k, norm};
        std::vector<float> logits = normal(rng_, static_cast<size_t>(n * E), 2.0f);
        // Planted rows (never skipped): an exact tie at the top (ids 1 and 3), every logit equal,
        // one logit far above the rest.
        {
          float* r0 = logits.data();
          const float top = *std::max_element(r0, r0 + E) + 1.0f;
          r0[1] = r0[3] = top;
          std::fill_n(logits.data() + E, E, 0.25f);
          logits[static_cast<size_t>(2 * E + E / 2)] = 60.0f;
        }
        std::vector<int32_t> ids[2];
        std::vector<float> w[2];
        for (int which = 0; which < 2; ++which) {
          Backend& b = backend(which);
          Mat lm = make_mat(b, n, E), im = make_mat(b, n, k, DType::I32), wm = make_mat(b, n, k);
          upload(b, lm, logits);
          upload(b, im, std::vector<int32_t>(static_cast<size_t>(n * k), -7));
          poison(b, wm);
          if (HasFatalFailure()) return;
          const auto step = rows_step(n, *pool_);
          HS_ASSERT_OK(b.begin_step(step->plan));
          const Status op = b.moe_route(lm.t, im.t, wm.t, mp);
          const Status end = b.end_step();
          HS_ASSERT_OK(op);
          HS_ASSERT_OK(end);
          ids[which] = download<int32_t>(b, im);
          w[which] = download(b, wm);
        }
        int64_t skipped = 0, bad_ids = 0, bad_w = 0;
        double max_abs = 0, max_rel = 0;
        for (int64_t r = 0; r < n; ++r) {
          const auto row = [&](const auto& v) { return std::vector(v.begin() + r * k, v.begin() + (r + 1) * k); };
          if (row(ids[1]) != row(ids[0])) {
            // A near tie among the top k + 1 makes either order right; anything else is wrong.
            std::vector<double> p(static_cast<size_t>(E));
            const float* l = logits.data() + r * E;
            const double mx = *std::max_element(l, l + E);
            for (int e = 0; e < E; ++e) p[static_cast<size_t>(e)] = std::exp(l[e] - mx);  // unnormalised: relative gaps
            std::vector<double> sorted = p;
            std::sort(sorted.begin(), sorted.end(), std::greater<>());
            bool near_tie = false;
            for (int j = 0; j < k && j + 1 < E; ++j)
              near_tie = near_tie || sorted[static_cast<size_t>(j)] - sorted[static_cast<size_t>(j + 1)] <=
                                         1e-6 * sorted[static_cast<size_t>(j)];
            if (near_tie && r > 2) {
              ++skipped;
              continue;
            }
            if (bad_ids++ < 5) {
              std::string want, have;
              for (int j = 0; j < k; ++j) {
                want += " " + std::to_string(ids[0][static_cast<size_t>(r * k + j)]);
                have += " " + std::to_string(ids[1][static_cast<size_t>(r * k + j)]);
              }
              ADD_FAILURE() << "moe_route E " << E << " k " << k << " row " << r << ": ids" << have << ", cpu" << want
                            << "; " << seed_note();
            }
            continue;
          }
          for (int j = 0; j < k; ++j) {
            const size_t i = static_cast<size_t>(r * k + j);
            const double e = std::fabs(static_cast<double>(w[1][i]) - w[0][i]);
            max_abs = std::max(max_abs, e);
            if (w[0][i] != 0) max_rel = std::max(max_rel, e / std::fabs(w[0][i]));
            if (!(e <= 1e-6 * std::fabs(w[0][i]) + 1e-37) && bad_w++ < 5)
              ADD_FAILURE() << "moe_route E " << E << " k " << k << " row " << r << " slot " << j << ": weight "
                            << w[1][i] << ", cpu " << w[0][i] << "; " << seed_note();
          }
        }
        const std::string shape = dims(n, E) + " top" + std::to_string(k) + (norm ? " norm" : "") +
                                  (skipped ? " (" + std::to_string(skipped) + " near ties skipped)" : "");
        print_row("moe_route", shape, max_abs, max_rel, 1e-6, bad_ids == 0 && bad_w == 0);
        EXPECT_EQ(bad_ids, 0) << shape;
        EXPECT_EQ(bad_w, 0) << shape;
        EXPECT_LE(skipped, 2) << shape << ": too many near ties for random logits; " << seed_note();
      }
    }
  }
}

TEST_F(HybridOps, MoeExperts) {
  struct Shape {
    int64_t H, F;
  };
  const MoeParams mp{8, 2, true};
  const int64_t E = mp.n_experts, k = mp.n_used;
  for (DType type : {DType::BF16, DType::F16}) {
    for (const Shape& s : {Shape{64, 32}, Shape{256, 128}, Shape{160, 96}}) {
      Tensor gate[2], up[2], down[2];
      prepare_weight_both(type, E * s.F, s.H, "blk.0.ffn_gate_exps.weight", gate);
      prepare_weight_both(type, E * s.F, s.H, "blk.0.ffn_up_exps.weight", up);
      prepare_weight_both(type, E * s.H, s.F, "blk.0.ffn_down_exps.weight", down);
      if (HasFatalFailure()) return;
      for (int64_t n : {1, 2, 7, 40}) {
        const auto step = rows_step(n, *pool_);
        const std::vector<float> x = normal(rng_, static_cast<size_t>(n * s.H), 1.0f, true);
        const std::vector<float> logits = normal(rng_, static_cast<size_t>(n * E), 2.0f);
        // The routing from the CPU's router, for both backends (moe_route is checked on its own).
        std::vector<int32_t> ids;
        std::vector<float> rw;
        {
          Mat lm = make_mat(*cpu_, n, E), im = make_mat(*cpu_, n, k, DType::I32), wm = make_mat(*cpu_, n, k);
          upload(*cpu_, lm, logits);
          if (HasFatalFailure()) return;
          HS_ASSERT_OK(cpu_->begin_step(step->plan));
          HS_ASSERT_OK(cpu_->moe_route(lm.t, im.t, wm.t, mp));
          HS_ASSERT_OK(cpu_->end_step());
          ids = download<int32_t>(*cpu_, im);
          rw = download(*cpu_, wm);
        }
        std::vector<float> out[2];
        for (int which = 0; which < 2; ++which) {
          Backend& b = backend(which);
          Mat xm = make_mat(b, n, s.H), om = make_mat(b, n, s.H), im = make_mat(b, n, k, DType::I32),
              wm = make_mat(b, n, k);
          upload(b, xm, x);
          upload(b, im, ids);
          upload(b, wm, rw);
          poison(b, om);
          if (HasFatalFailure()) return;
          HS_ASSERT_OK(b.begin_step(step->plan));
          const Status op = b.moe_experts(xm.t, gate[which], up[which], down[which], im.t, wm.t, om.t, mp);
          const Status end = b.end_step();
          HS_ASSERT_OK(op);
          HS_ASSERT_OK(end);
          out[which] = download(b, om);
        }
        check("moe_experts", dims(n, s.H) + " " + std::to_string(E) + " x " + std::string(dtype_name(type)) + " F" +
                                 std::to_string(s.F) + " top" + std::to_string(k),
              out[1], out[0], 5e-3, 1.5e-2);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_F(HybridOps, AddSigmoidGated) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 2048}, {40, 96}, {1, 1000}}) {
    std::vector<float> gate = normal(rng_, static_cast<size_t>(rows), 3.0f);
    gate[0] = rows > 1 ? 30.0f : -30.0f;  // saturated
    const auto step = rows_step(rows, *pool_);
    std::vector<std::vector<float>> ref, got;
    run_both(step->plan,
             {{{rows, cols}, normal(rng_, static_cast<size_t>(rows * cols), 1.0f, true)},
              {{rows, cols}, normal(rng_, static_cast<size_t>(rows * cols))},
              {{rows, 1}, gate}},
             {},
             [&](Backend& b, int, std::vector<Tensor>& in, std::vector<Tensor>&) {
               return b.add_sigmoid_gated(in[0], in[1], in[2]);
             },
             ref, got);
    if (HasFatalFailure()) return;
    check("add_sig_gate", dims(rows, cols), got[0], ref[0], 1e-5);
  }
}

// ---- refusals ------------------------------------------------------------------------------------

// Host tensors, mismatched shapes and out-of-range slots get errors from the CUDA backend (no
// crash, no launch), and the backend still runs a valid op afterwards.
TEST_F(HybridOps, RefusesHostTensorsAndBadShapes) {
  const int64_t n = 3, C = 32;
  const auto step = make_step({{0, 0, 1}, {2, 5, 2}}, false, *pool_);
  Mat x = make_mat(*dev_, n, C), out = make_mat(*dev_, n, C), cstate = make_mat(*dev_, kSlots, 3 * C);
  Tensor cw[2];
  prepare_both(normal(rng_, static_cast<size_t>(C * 4)), cw);
  if (HasFatalFailure()) return;
  std::vector<float> host_x(static_cast<size_t>(n * C)), host_state(static_cast<size_t>(kSlots * 3 * C));
  const Tensor hx = Tensor::matrix(host_x.data(), DType::F32, n, C);
  const Tensor hstate = Tensor::matrix(host_state.data(), DType::F32, kSlots, 3 * C);
  auto refused = [&](const Status& st, const char* what) {
    EXPECT_FALSE(st.is_ok()) << what << " was accepted";
    if (!st.is_ok()) std::printf("refused: %s: %s\n", what, st.message().c_str());
  };

  HS_ASSERT_OK(dev_->begin_step(step->plan));
  refused(dev_->conv1d_causal(hx, cw[1], 4, cstate.t, out.t), "conv1d_causal with host x");
  refused(dev_->conv1d_causal(x.t, cw[1], 4, hstate, out.t), "conv1d_causal with a host state");
  refused(dev_->conv1d_causal(x.t, cw[0], 4, cstate.t, out.t), "conv1d_causal with a host weight");
  refused(dev_->conv1d_causal(x.t, cw[1], 4, cstate.t, x.t), "conv1d_causal with out aliasing x");
  refused(dev_->conv1d_causal(x.t, cw[1], 3, cstate.t, out.t), "conv1d_causal with a kernel the weight does not fit");
  refused(dev_->conv1d_causal(x.t.slice_rows(0, 2), cw[1], 4, cstate.t, out.t.slice_rows(0, 2)),
          "conv1d_causal with fewer rows than the step's tokens");

  const DeltaRuleParams dp{1, 2, 16, 16, true};
  Mat q = make_mat(*dev_, n, 16), k = make_mat(*dev_, n, 16), v = make_mat(*dev_, n, 32), g = make_mat(*dev_, n, 2),
      beta = make_mat(*dev_, n, 2), o = make_mat(*dev_, n, 32), dstate = make_mat(*dev_, kSlots, 2 * 16 * 16),
      v_bad = make_mat(*dev_, n, 24), dstate_bad = make_mat(*dev_, kSlots, 2 * 16 * 16 - 1);
  refused(dev_->gated_delta_rule(q.t, k.t, v_bad.t, g.t, beta.t, dstate.t, o.t, dp),
          "gated_delta_rule with v too narrow");
  refused(dev_->gated_delta_rule(q.t, k.t, v.t, g.t, beta.t, dstate_bad.t, o.t, dp),
          "gated_delta_rule with a state of the wrong width");
  refused(dev_->gated_delta_rule(q.t, k.t, v.t, g.t, beta.t, dstate.t, o.t, DeltaRuleParams{2, 3, 8, 16, true}),
          "gated_delta_rule with v heads not a multiple of k heads");
  refused(dev_->gated_delta_rule(Tensor::matrix(host_x.data(), DType::F32, n, 16), k.t, v.t, g.t, beta.t, dstate.t, o.t,
                                 dp),
          "gated_delta_rule with host q");

  Tensor rw[2];
  prepare_both(normal(rng_, 24), rw);
  if (HasFatalFailure()) return;
  refused(dev_->rms_norm_gated(x.t, out.t, rw[1], 1e-6f, o.t), "rms_norm_gated with a weight not dividing the rows");
  refused(dev_->l2_norm(hx, 16, 1e-6f, 1.0f), "l2_norm of a host tensor");
  refused(dev_->sigmoid_mul(x.t, g.t), "sigmoid_mul with a gate of another shape");

  Mat logits = make_mat(*dev_, n, 8), ids = make_mat(*dev_, n, 2, DType::I32), w = make_mat(*dev_, n, 2);
  std::vector<float> host_logits(static_cast<size_t>(n * 8));
  refused(dev_->moe_route(Tensor::matrix(host_logits.data(), DType::F32, n, 8), ids.t, w.t, MoeParams{8, 2, true}),
          "moe_route of host logits");
  refused(dev_->moe_route(logits.t, ids.t, w.t, MoeParams{8, 9, true}), "moe_route of more experts than there are");
  refused(dev_->moe_route(logits.t, w.t, w.t, MoeParams{8, 2, true}), "moe_route with f32 ids");
  // Expert weights that prepare_weight did not make (f32 on the device).
  Mat f32_gate = make_mat(*dev_, 8 * 16, C), f32_down = make_mat(*dev_, 8 * C, 16);
  refused(dev_->moe_experts(x.t, f32_gate.t, f32_gate.t, f32_down.t, ids.t, w.t, out.t, MoeParams{8, 2, true}),
          "moe_experts with f32 expert weights");
  Mat gate_col = make_mat(*dev_, n, 2);
  refused(dev_->add_sigmoid_gated(x.t, out.t, gate_col.t), "add_sigmoid_gated with a gate of 2 columns");
  HS_ASSERT_OK(dev_->end_step());

  // A plan whose sequence names slot 4 of a 4-slot state: begin_step or the op refuses it.
  const auto far = make_step({{4, 3, 1}}, false, *pool_);
  Status st = dev_->begin_step(far->plan);
  if (st.is_ok()) {
    st = dev_->conv1d_causal(x.t.slice_rows(0, 1), cw[1], 4, cstate.t, out.t.slice_rows(0, 1));
    HS_ASSERT_OK(dev_->end_step());
  }
  refused(st, "a state slot past the state tensor");

  // Still working: a valid op runs and ends its step cleanly.
  HS_ASSERT_OK(dev_->begin_step(step->plan));
  HS_ASSERT_OK(dev_->conv1d_causal(x.t, cw[1], 4, cstate.t, out.t));
  HS_ASSERT_OK(dev_->end_step());
}

}  // namespace
}  // namespace hs

#endif  // HS_WITH_CUDA
