// tests/unit/backend/test_moe.cpp — the mixture-of-experts ops of the CPU backend (moe_route,
// moe_experts, add_sigmoid_gated) against a straightforward double-precision reference on fresh
// random inputs (the seed is printed and named in every failure): softmax top-k routing with
// and without renormalisation, the routed experts' weighted GLU sum for f32 and bf16 expert
// weights at exact and int8x2 matmul precision (experts that get no token, and tokens whose
// experts are shared with others), the shared expert's sigmoid gate; bad shapes and ids are
// refused; a backend without the ops (the base class) refuses them by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cpu_backend.h"

namespace hs {
namespace {

std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

unsigned fresh_seed(const char* test) {
  const unsigned seed = std::random_device{}();
  std::printf("[moe] %s: seed %u\n", test, seed);
  return seed;
}

// Reference router: softmax in double, top-k by probability (ties: lower id), renormalised.
void ref_route(const std::vector<float>& logits, int64_t n, int E, int k, bool norm, std::vector<int32_t>& ids,
               std::vector<double>& w) {
  ids.assign(n * k, 0);
  w.assign(n * k, 0);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> p(E);
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; ++e) mx = std::max(mx, double(logits[t * E + e]));
    for (int e = 0; e < E; ++e) sum += p[e] = std::exp(logits[t * E + e] - mx);
    for (auto& v : p) v /= sum;
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double chosen = 0;
    for (int j = 0; j < k; ++j) chosen += p[order[j]];
    for (int j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      w[t * k + j] = norm ? p[order[j]] / chosen : p[order[j]];
    }
  }
}

// The weights as stored (f32, or bf16 bits by truncation) and their exact values.
struct Weights {
  DType type = DType::F32;
  std::vector<float> f32, value;  // value: what the stored weight is, as f32
  std::vector<uint16_t> bf16;
  Weights(std::vector<float> w, DType t) : type(t), f32(std::move(w)) {
    value = f32;
    if (t == DType::BF16) {
      bf16.resize(f32.size());
      for (size_t i = 0; i < f32.size(); ++i) {
        uint32_t b;
        std::memcpy(&b, &f32[i], 4);
        bf16[i] = static_cast<uint16_t>(b >> 16);
        b = uint32_t{bf16[i]} << 16;
        std::memcpy(&value[i], &b, 4);
      }
    }
  }
  Tensor tensor(int64_t rows, int64_t cols) const {
    return Tensor::matrix(type == DType::BF16 ? static_cast<const void*>(bf16.data()) : f32.data(), type, rows, cols);
  }
};

class MoeOps : public ::testing::Test {
 protected:
  void begin(int64_t n) {
    tokens_.assign(n, 0);
    positions_.resize(n);
    std::iota(positions_.begin(), positions_.end(), 0);
    seq_index_.assign(n, 0);
    plan_ = ForwardPlan{};
    plan_.tokens = tokens_;
    plan_.positions = positions_;
    plan_.seq_index = seq_index_;
    plan_.seqs = std::span<SeqKv* const>(seq_ptrs_, 1);
    plan_.seq_tokens = {static_cast<int32_t>(n)};
    plan_.pool = &pool_;
    ASSERT_TRUE(be_.begin_step(plan_).is_ok());
  }
  CpuBackend be_;
  ThreadPool pool_;
  SeqKv seq_;
  SeqKv* seq_ptrs_[1] = {&seq_};
  std::vector<int32_t> tokens_, positions_, seq_index_;
  ForwardPlan plan_;
};

TEST_F(MoeOps, RouteMatchesReference) {
  const unsigned seed = fresh_seed("RouteMatchesReference");
  std::mt19937 rng(seed);
  const int64_t n = 37;
  for (const auto& [E, k] : {std::pair{4, 2}, {8, 3}, {16, 1}, {5, 5}})
    for (bool norm : {true, false}) {
      begin(n);
      std::vector<float> logits = randn(n * E, rng, 2.0f);
      std::vector<int32_t> ids(n * k, -1);
      std::vector<float> w(n * k, -1);
      const MoeParams p{E, k, norm};
      ASSERT_TRUE(be_.moe_route(Tensor::matrix(logits.data(), DType::F32, n, E),
                                Tensor::matrix(ids.data(), DType::I32, n, k), Tensor::matrix(w.data(), DType::F32, n, k), p)
                      .is_ok());
      std::vector<int32_t> rid;
      std::vector<double> rw;
      ref_route(logits, n, E, k, norm, rid, rw);
      for (int64_t i = 0; i < n * k; ++i) {
        ASSERT_EQ(ids[i], rid[i]) << "E " << E << " k " << k << " norm " << norm << " at " << i << " seed " << seed;
        ASSERT_NEAR(w[i], rw[i], 1e-6) << "E " << E << " k " << k << " norm " << norm << " at " << i << " seed " << seed;
      }
      if (norm)
        for (int64_t t = 0; t < n; ++t) {
          double s = 0;
          for (int j = 0; j < k; ++j) s += w[t * k + j];
          ASSERT_NEAR(s, 1.0, 1e-6) << "seed " << seed;
        }
    }
}

TEST_F(MoeOps, ExpertsMatchReference) {
  const unsigned seed = fresh_seed("ExpertsMatchReference");
  std::mt19937 rng(seed);
  const int H = 64, F = 48, E = 6, k = 2;
  for (DType wt : {DType::F32, DType::BF16})
    for (MatmulPrecision prec : {MatmulPrecision::kExact, MatmulPrecision::kInt8x2})
      for (int64_t n : {1, 3, 29}) {
        be_.set_matmul_precision(prec);
        begin(n);
        const Weights gate(randn(size_t{E} * F * H, rng, 0.2f), wt), up(randn(size_t{E} * F * H, rng, 0.2f), wt),
            down(randn(size_t{E} * H * F, rng, 0.2f), wt);
        std::vector<float> x = randn(n * H, rng);
        // Routing that leaves expert 5 unused and sends most tokens to expert 1.
        std::vector<int32_t> ids(n * k);
        std::vector<float> w(n * k);
        std::uniform_int_distribution<int> pick(0, E - 2);
        std::uniform_real_distribution<float> uw(0.05f, 1.0f);
        for (int64_t t = 0; t < n; ++t) {
          ids[t * k] = t % 3 ? 1 : pick(rng);
          do ids[t * k + 1] = pick(rng);
          while (ids[t * k + 1] == ids[t * k]);
          w[t * k] = uw(rng);
          w[t * k + 1] = uw(rng);
        }
        std::vector<float> out(n * H, 123.0f);
        const MoeParams p{E, k, true};
        const Status st = be_.moe_experts(Tensor::matrix(x.data(), DType::F32, n, H), gate.tensor(E * F, H),
                                          up.tensor(E * F, H), down.tensor(E * H, F),
                                          Tensor::matrix(ids.data(), DType::I32, n, k),
                                          Tensor::matrix(w.data(), DType::F32, n, k),
                                          Tensor::matrix(out.data(), DType::F32, n, H), p);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        double max_err = 0, max_ref = 0;
        for (int64_t t = 0; t < n; ++t) {
          std::vector<double> ref(H, 0.0);
          for (int j = 0; j < k; ++j) {
            const int e = ids[t * k + j];
            std::vector<double> h(F);
            for (int f = 0; f < F; ++f) {
              double g = 0, u = 0;
              for (int c = 0; c < H; ++c) {
                g += double(gate.value[(size_t(e) * F + f) * H + c]) * x[t * H + c];
                u += double(up.value[(size_t(e) * F + f) * H + c]) * x[t * H + c];
              }
              h[f] = g / (1 + std::exp(-g)) * u;
            }
            for (int c = 0; c < H; ++c) {
              double d = 0;
              for (int f = 0; f < F; ++f) d += double(down.value[(size_t(e) * H + c) * F + f]) * h[f];
              ref[c] += w[t * k + j] * d;
            }
          }
          for (int c = 0; c < H; ++c) {
            max_err = std::max(max_err, std::fabs(out[t * H + c] - ref[c]));
            max_ref = std::max(max_ref, std::fabs(ref[c]));
          }
        }
        // exact: f32 rounding only; int8x2: ~16-bit activations (docs/cpu-engine.md).
        const double tol = (prec == MatmulPrecision::kExact ? 2e-5 : 1e-3) * (1 + max_ref);
        EXPECT_LT(max_err, tol) << dtype_name(wt) << " " << matmul_precision_name(prec) << " n " << n << " seed " << seed;
        EXPECT_GT(max_ref, 0.1) << "a reference of zeros would prove nothing";
      }
}

// Each token's result does not depend on the other rows of the step (batched = alone).
TEST_F(MoeOps, ExpertsRowIndependent) {
  const unsigned seed = fresh_seed("ExpertsRowIndependent");
  std::mt19937 rng(seed);
  const int H = 32, F = 16, E = 4, k = 2, n = 9;
  const Weights gate(randn(size_t{E} * F * H, rng, 0.3f), DType::BF16), up(randn(size_t{E} * F * H, rng, 0.3f), DType::BF16),
      down(randn(size_t{E} * H * F, rng, 0.3f), DType::BF16);
  std::vector<float> x = randn(n * H, rng), logits = randn(n * E, rng);
  std::vector<int32_t> ids(n * k);
  std::vector<float> w(n * k), all(n * H), one(H);
  const MoeParams p{E, k, true};
  begin(n);
  ASSERT_TRUE(be_.moe_route(Tensor::matrix(logits.data(), DType::F32, n, E), Tensor::matrix(ids.data(), DType::I32, n, k),
                            Tensor::matrix(w.data(), DType::F32, n, k), p)
                  .is_ok());
  ASSERT_TRUE(be_.moe_experts(Tensor::matrix(x.data(), DType::F32, n, H), gate.tensor(E * F, H), up.tensor(E * F, H),
                              down.tensor(E * H, F), Tensor::matrix(ids.data(), DType::I32, n, k),
                              Tensor::matrix(w.data(), DType::F32, n, k), Tensor::matrix(all.data(), DType::F32, n, H), p)
                  .is_ok());
  for (int t = 0; t < n; ++t) {
    begin(1);
    ASSERT_TRUE(be_.moe_experts(Tensor::matrix(x.data() + t * H, DType::F32, 1, H), gate.tensor(E * F, H),
                                up.tensor(E * F, H), down.tensor(E * H, F),
                                Tensor::matrix(ids.data() + t * k, DType::I32, 1, k),
                                Tensor::matrix(w.data() + t * k, DType::F32, 1, k),
                                Tensor::matrix(one.data(), DType::F32, 1, H), p)
                    .is_ok());
    for (int c = 0; c < H; ++c) ASSERT_EQ(one[c], all[t * H + c]) << "token " << t << " seed " << seed;
  }
}

TEST_F(MoeOps, SharedExpertGate) {
  const unsigned seed = fresh_seed("SharedExpertGate");
  std::mt19937 rng(seed);
  const int64_t n = 11, H = 40;
  std::vector<float> x = randn(n * H, rng), y = randn(n * H, rng), g = randn(n, rng, 3.0f);
  std::vector<float> x0 = x;
  begin(n);
  ASSERT_TRUE(be_.add_sigmoid_gated(Tensor::matrix(x.data(), DType::F32, n, H), Tensor::matrix(y.data(), DType::F32, n, H),
                                    Tensor::matrix(g.data(), DType::F32, n, 1))
                  .is_ok());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < H; ++c) {
      const double e = x0[r * H + c] + y[r * H + c] / (1 + std::exp(-double(g[r])));
      ASSERT_NEAR(x[r * H + c], e, 1e-5 * (1 + std::fabs(e))) << "seed " << seed;
    }
}

TEST_F(MoeOps, RefusesBadInput) {
  const int64_t n = 2, H = 8, F = 4, E = 3, k = 2;
  begin(n);
  std::vector<float> x(n * H, 1), out(n * H), wts(E * F * H, 0.1f), down(E * H * F, 0.1f), w(n * k, 0.5f), lg(n * E);
  std::vector<int32_t> ids = {0, 1, 2, 3};  // 3 is not an expert
  const Tensor tx = Tensor::matrix(x.data(), DType::F32, n, H), to = Tensor::matrix(out.data(), DType::F32, n, H);
  const Tensor tg = Tensor::matrix(wts.data(), DType::F32, E * F, H), td = Tensor::matrix(down.data(), DType::F32, E * H, F);
  const Tensor ti = Tensor::matrix(ids.data(), DType::I32, n, k), tw = Tensor::matrix(w.data(), DType::F32, n, k);
  Status st = be_.moe_experts(tx, tg, tg, td, ti, tw, to, MoeParams{E, k, true});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("expert 3"), std::string::npos) << st.message();
  ids[3] = 0;
  EXPECT_TRUE(be_.moe_experts(tx, tg, tg, td, ti, tw, to, MoeParams{E, k, true}).is_ok());
  st = be_.moe_experts(tx, tg, tg, td.slice_rows(0, E * H - 1), ti, tw, to, MoeParams{E, k, true});
  EXPECT_NE(st.message().find("moe_experts"), std::string::npos) << st.message();
  st = be_.moe_experts(tx, tg, tg, td, ti, tw, tx, MoeParams{E, k, true});
  EXPECT_NE(st.message().find("alias"), std::string::npos) << st.message();
  st = be_.moe_route(Tensor::matrix(lg.data(), DType::F32, n, E), ti, tw, MoeParams{E, 4, true});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  st = be_.moe_route(Tensor::matrix(lg.data(), DType::F32, n, E), tw, tw, MoeParams{E, k, true});  // ids not I32
  EXPECT_NE(st.message().find("ids"), std::string::npos) << st.message();
}

// A backend that implements only the core ops: the MoE ops are the base class's refusals.
class CoreOnlyBackend final : public Backend {
 public:
  Device device() const override { return Device::kCuda; }
  std::string name() const override { return "core only"; }
  Result<Buffer> alloc(size_t, std::string_view) override { return no(); }
  void free_memory(void*) override {}
  Result<Tensor> prepare_weight(const Tensor&, std::string_view) override { return no(); }
  Result<Tensor> prepare_vector(std::span<const float>, std::string_view) override { return no(); }
  Status to_host(const Tensor&, void*) override { return no(); }
  Status from_host(const void*, Tensor) override { return no(); }
  Status begin_step(const ForwardPlan&) override { return no(); }
  Status end_step() override { return no(); }
  Status embedding(const Tensor&, Tensor) override { return no(); }
  Status matmul(const Tensor&, const Tensor&, Tensor) override { return no(); }
  Status rms_norm(const Tensor&, const Tensor&, float, Tensor) override { return no(); }
  Status rope(Tensor, int, float, bool) override { return no(); }
  Status glu(GluKind, const Tensor&, const Tensor&, Tensor) override { return no(); }
  Status add(Tensor, const Tensor&) override { return no(); }
  Status add_bias(Tensor, const Tensor&) override { return no(); }
  Status scale(Tensor, float) override { return no(); }
  Status softcap(Tensor, float) override { return no(); }
  Status copy(const Tensor&, Tensor) override { return no(); }
  Status logit_rows(const Tensor&, Tensor) override { return no(); }
  Status kv_write(int, const Tensor&, const Tensor&) override { return no(); }
  Status attention(int, const Tensor&, Tensor, const AttentionParams&) override { return no(); }

 private:
  static Status no() { return make_error(StatusCode::kInternal, "not a core op of this test"); }
};

TEST(MoeOpsBase, RefusedByName) {
  CoreOnlyBackend b;
  const Tensor t;
  const MoeParams p{4, 2, true};
  for (const auto& [st, op] : {std::pair{b.moe_route(t, t, t, p), "moe_route"},
                               {b.moe_experts(t, t, t, t, t, t, t, p), "moe_experts"},
                               {b.add_sigmoid_gated(t, t, t), "add_sigmoid_gated"}}) {
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << op;
    EXPECT_NE(st.message().find(op), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("cuda"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace hs
