// tests/unit/backend/test_delta_rule.cpp — the hybrid (Gated DeltaNet) ops of the CPU backend
// against straightforward double-precision references on fresh random inputs: the chunked
// delta rule equals the recurrent one (and both the reference), with and without a start
// state and for lengths that do not align with the chunk; the causal conv and the delta rule
// split over several steps equal one step; sequences interleaved in one batch equal each
// alone; the gates, norms and partial RoPE equal their formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/delta_rule.h"
#include "backend/cpu_backend.h"

namespace hs {
namespace {

std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void l2n(float* x, int n, float scale) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] / std::sqrt(ss + 1e-6) * scale);
}

// One head's inputs for T tokens: q (normalised, scaled), k (normalised), v, g <= 0, beta.
struct HeadInputs {
  int T, dk, dv;
  std::vector<float> q, k, v, g, beta;
  HeadInputs(int T_, int dk_, int dv_, std::mt19937& rng) : T(T_), dk(dk_), dv(dv_) {
    q = randn(size_t(T) * dk, rng);
    k = randn(size_t(T) * dk, rng);
    v = randn(size_t(T) * dv, rng);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int t = 0; t < T; ++t) {
      l2n(&q[size_t(t) * dk], dk, 1.0f / std::sqrt(float(dk)));
      l2n(&k[size_t(t) * dk], dk, 1.0f);
      g.push_back(-2.0f * u(rng) * u(rng));  // decays in (e^-2, 1]
      beta.push_back(u(rng));
    }
  }
  cpu::DeltaHead head(std::vector<float>& out, std::vector<float>& state) const {
    cpu::DeltaHead h;
    h.q = {q.data(), dk};
    h.k = {k.data(), dk};
    h.v = {v.data(), dv};
    h.g = {g.data(), 1};
    h.beta = {beta.data(), 1};
    h.out = {out.data(), dv};
    h.state = state.data();
    h.k_dim = dk;
    h.v_dim = dv;
    return h;
  }
};

// transformers' torch_recurrent_gated_delta_rule in double.
void reference_delta(const HeadInputs& in, std::vector<double>& S, std::vector<double>& out) {
  const int dk = in.dk, dv = in.dv;
  out.assign(size_t(in.T) * dv, 0);
  std::vector<double> u(dv);
  for (int t = 0; t < in.T; ++t) {
    const double e = std::exp(double(in.g[t]));
    for (auto& s : S) s *= e;
    for (int j = 0; j < dv; ++j) {
      u[j] = 0;
      for (int a = 0; a < dk; ++a) u[j] += S[size_t(a) * dv + j] * in.k[size_t(t) * dk + a];
      u[j] = in.beta[t] * (in.v[size_t(t) * dv + j] - u[j]);
    }
    for (int a = 0; a < dk; ++a)
      for (int j = 0; j < dv; ++j) S[size_t(a) * dv + j] += in.k[size_t(t) * dk + a] * u[j];
    for (int j = 0; j < dv; ++j)
      for (int a = 0; a < dk; ++a) out[size_t(t) * dv + j] += S[size_t(a) * dv + j] * in.q[size_t(t) * dk + a];
  }
}

std::vector<int32_t> iota_rows(int T) {
  std::vector<int32_t> r(T);
  for (int i = 0; i < T; ++i) r[i] = i;
  return r;
}

TEST(DeltaRule, ChunkedEqualsRecurrentAndReference) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int T : {1, 5, 64, 150}) {
    for (bool with_state : {false, true}) {
      const int dk = 32, dv = 48;
      HeadInputs in(T, dk, dv, rng);
      std::vector<float> s0 = with_state ? randn(size_t(dk) * dv, rng, 0.3f) : std::vector<float>(size_t(dk) * dv, 0);
      std::vector<float> out_r(size_t(T) * dv), out_c(size_t(T) * dv), s_r = s0, s_c = s0;
      const auto rows = iota_rows(T);
      cpu::delta_rule_recurrent(in.head(out_r, s_r), rows);
      cpu::delta_rule_chunked(in.head(out_c, s_c), rows);
      std::vector<double> S(s0.begin(), s0.end()), ref;
      reference_delta(in, S, ref);
      double max_rc = 0, max_ref = 0, max_s = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        max_rc = std::max(max_rc, std::fabs(double(out_r[i]) - out_c[i]));
        max_ref = std::max({max_ref, std::fabs(out_r[i] - ref[i]), std::fabs(out_c[i] - ref[i])});
      }
      for (size_t i = 0; i < S.size(); ++i)
        max_s = std::max({max_s, std::fabs(s_r[i] - S[i]), std::fabs(s_c[i] - S[i])});
      EXPECT_LT(max_rc, 2e-5) << "T " << T << " seed " << seed;
      EXPECT_LT(max_ref, 2e-5) << "T " << T << " seed " << seed;
      EXPECT_LT(max_s, 2e-5) << "T " << T << " seed " << seed;
    }
  }
}

TEST(DeltaRule, ChunkedInPiecesEqualsWhole) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int T = 200, dk = 16, dv = 24;
  HeadInputs in(T, dk, dv, rng);
  std::vector<float> out_w(size_t(T) * dv), out_p(size_t(T) * dv), s_w(size_t(dk) * dv, 0), s_p = s_w;
  const auto rows = iota_rows(T);
  cpu::delta_rule_chunked(in.head(out_w, s_w), rows);
  // Pieces of 77, 1 (recurrent), 100, 22 tokens, each continuing from the state.
  int at = 0;
  for (int len : {77, 1, 100, 22}) {
    std::span<const int32_t> piece(rows.data() + at, len);
    if (len == 1) cpu::delta_rule_recurrent(in.head(out_p, s_p), piece);
    else cpu::delta_rule_chunked(in.head(out_p, s_p), piece);
    at += len;
  }
  for (size_t i = 0; i < out_w.size(); ++i) ASSERT_NEAR(out_w[i], out_p[i], 2e-5) << i << " seed " << seed;
  for (size_t i = 0; i < s_w.size(); ++i) ASSERT_NEAR(s_w[i], s_p[i], 2e-5) << i << " seed " << seed;
}

TEST(DeltaRule, ConvCausalMatchesReferenceAcrossSteps) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int T = 37, C = 24, K = 4;
  auto x = randn(size_t(T) * C, rng), w = randn(size_t(C) * K, rng);
  // Reference: zero-padded conv over the whole sequence, then SiLU.
  std::vector<double> ref(size_t(T) * C);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int j = 0; j < K; ++j) {
        const int src = t - (K - 1) + j;
        if (src >= 0) s += double(w[size_t(c) * K + j]) * x[size_t(src) * C + c];
      }
      ref[size_t(t) * C + c] = s / (1 + std::exp(-s));
    }
  for (std::vector<int> pieces : {std::vector<int>{37}, std::vector<int>{1, 1, 2, 33}, std::vector<int>{10, 1, 26}}) {
    std::vector<float> out(size_t(T) * C), state(size_t(K - 1) * C, 0);
    const auto rows = iota_rows(T);
    int at = 0;
    for (int len : pieces) {
      cpu::conv1d_causal_silu({x.data(), C}, w.data(), C, K, state.data(), {out.data(), C},
                              std::span<const int32_t>(rows.data() + at, len));
      at += len;
    }
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5) << i << " seed " << seed;
    for (int s = 0; s < K - 1; ++s)
      for (int c = 0; c < C; ++c) ASSERT_EQ(state[size_t(s) * C + c], x[size_t(T - (K - 1) + s) * C + c]);
  }
}

TEST(DeltaRule, GatesAndNorms) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int n = 32;
  auto x = randn(n, rng), z = randn(n, rng), w = randn(n, rng);
  std::vector<float> out(n);
  cpu::rms_norm_gated(x.data(), z.data(), w.data(), n, 1e-6f, out.data());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  for (int i = 0; i < n; ++i) {
    const double e = w[i] * x[i] / std::sqrt(ss / n + 1e-6) * z[i] / (1 + std::exp(-double(z[i])));
    ASSERT_NEAR(out[i], e, 1e-5 * (1 + std::fabs(e))) << seed;
  }
  cpu::l2_norm(x.data(), n, 1e-6f, out.data());
  for (int i = 0; i < n; ++i) ASSERT_NEAR(out[i], x[i] / std::sqrt(ss + 1e-6), 1e-6) << seed;
  auto a = randn(8, rng, 5.0f), b = randn(8, rng), ssm_a = randn(8, rng), dt = randn(8, rng);
  a[0] = 30.0f;  // softplus past its threshold
  auto a0 = a, b0 = b;
  cpu::delta_gates(a.data(), b.data(), ssm_a.data(), dt.data(), 8);
  for (int h = 0; h < 8; ++h) {
    const double xx = double(a0[h]) + dt[h];
    const double sp = xx > 20 ? xx : std::log1p(std::exp(xx));
    ASSERT_NEAR(a[h], ssm_a[h] * sp, 1e-5 * (1 + std::fabs(ssm_a[h] * sp))) << seed;
    ASSERT_NEAR(b[h], 1 / (1 + std::exp(-double(b0[h]))), 1e-6) << seed;
  }
  auto g = randn(n, rng), y = x;
  cpu::sigmoid_mul(y.data(), g.data(), n);
  for (int i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i] / (1 + std::exp(-double(g[i]))), 1e-6) << seed;
}

// The backend ops over a plan: two sequences interleaved in one batch, in two steps, equal the
// reference of each sequence alone; partial RoPE equals its formula.
class HybridBackendOps : public ::testing::Test {
 protected:
  void plan_step(const std::vector<int32_t>& seq_of_row, std::vector<int32_t>& pos_next) {
    tokens_.assign(seq_of_row.size(), 0);
    positions_.clear();
    seq_index_ = seq_of_row;
    for (int32_t s : seq_of_row) positions_.push_back(pos_next[s]++);
    plan_ = ForwardPlan{};
    plan_.tokens = tokens_;
    plan_.positions = positions_;
    plan_.seq_index = seq_index_;
    plan_.seqs = std::span<SeqKv* const>(seq_ptrs_, 2);
    plan_.pool = &pool_;
    plan_.seq_tokens.assign(2, 0);
    for (int32_t s : seq_of_row) ++plan_.seq_tokens[s];
    plan_.state_slots = {2, 0};  // slots out of order on purpose
    ASSERT_TRUE(be_.begin_step(plan_).is_ok());
  }
  CpuBackend be_;
  ThreadPool pool_;
  SeqKv seqs_[2];
  SeqKv* seq_ptrs_[2] = {&seqs_[0], &seqs_[1]};
  std::vector<int32_t> tokens_, positions_, seq_index_;
  ForwardPlan plan_;
};

TEST_F(HybridBackendOps, DeltaRuleAndConvInterleavedSteps) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int nk = 2, nv = 4, dk = 16, dv = 8, K = 4;
  const int lens[2] = {90, 70};
  // Per sequence: raw inputs per token row [q | k | v] (conv channels), and gates.
  const int C = 2 * nk * dk + nv * dv;
  std::vector<std::vector<float>> xs, gs, bs;
  for (int s = 0; s < 2; ++s) {
    xs.push_back(randn(size_t(lens[s]) * C, rng));
    std::vector<float> g(size_t(lens[s]) * nv), b(size_t(lens[s]) * nv);
    std::uniform_real_distribution<float> u(0, 1);
    for (auto& v : g) v = -u(rng);
    for (auto& v : b) v = u(rng);
    gs.push_back(g);
    bs.push_back(b);
  }
  auto w = randn(size_t(C) * K, rng, 0.5f);
  std::vector<float> conv_state(3 * size_t(K - 1) * C, 7.0f);  // garbage: position 0 must ignore it
  std::vector<float> delta_state(3 * size_t(nv) * dk * dv, 7.0f);
  // Two steps: rows interleaved 1:1 until the shorter runs out; the second step continues both.
  std::vector<int32_t> pos_next{0, 0};
  std::vector<std::vector<float>> outs(2);
  const int split[2] = {41, 33};
  for (int step = 0; step < 2; ++step) {
    std::vector<int32_t> seq_of_row;
    int take[2];
    for (int s = 0; s < 2; ++s) take[s] = step == 0 ? split[s] : lens[s] - split[s];
    for (int i = 0; i < std::max(take[0], take[1]); ++i)
      for (int s = 0; s < 2; ++s)
        if (i < take[s]) seq_of_row.push_back(s);
    const std::vector<int32_t> start = pos_next;
    plan_step(seq_of_row, pos_next);
    const int64_t n = static_cast<int64_t>(seq_of_row.size());
    std::vector<float> x(n * C), conv(n * C), g(n * nv), b(n * nv), out(n * nv * dv);
    std::vector<int32_t> at = start;
    for (int64_t r = 0; r < n; ++r) {
      const int s = seq_of_row[r], p = at[s]++;
      std::copy_n(&xs[s][size_t(p) * C], C, &x[r * C]);
      std::copy_n(&gs[s][size_t(p) * nv], nv, &g[r * nv]);
      std::copy_n(&bs[s][size_t(p) * nv], nv, &b[r * nv]);
    }
    const Tensor tx = Tensor::matrix(x.data(), DType::F32, n, C), tc = Tensor::matrix(conv.data(), DType::F32, n, C);
    const Tensor tw = Tensor::matrix(w.data(), DType::F32, 1, int64_t(C) * K);
    ASSERT_TRUE(be_.conv1d_causal(tx, tw, K, Tensor::matrix(conv_state.data(), DType::F32, 3, int64_t(K - 1) * C), tc)
                    .is_ok());
    auto col = [&](const Tensor& t, int64_t c0, int64_t cols) {
      Tensor v = t;
      v.data = t.f32() + c0;
      v.cols = cols;
      return v;
    };
    const Tensor q = col(tc, 0, nk * dk), k = col(tc, nk * dk, nk * dk), v = col(tc, 2 * nk * dk, nv * dv);
    ASSERT_TRUE(be_.l2_norm(q, dk, 1e-6f, 1.0f / std::sqrt(float(dk))).is_ok());
    ASSERT_TRUE(be_.l2_norm(k, dk, 1e-6f, 1.0f).is_ok());
    const DeltaRuleParams dp{nk, nv, dk, dv, true};
    ASSERT_TRUE(be_.gated_delta_rule(q, k, v, Tensor::matrix(g.data(), DType::F32, n, nv),
                                     Tensor::matrix(b.data(), DType::F32, n, nv),
                                     Tensor::matrix(delta_state.data(), DType::F32, 3, int64_t(nv) * dk * dv),
                                     Tensor::matrix(out.data(), DType::F32, n, int64_t(nv) * dv), dp)
                    .is_ok());
    ASSERT_TRUE(be_.end_step().is_ok());
    for (int64_t r = 0; r < n; ++r) outs[seq_of_row[r]].insert(outs[seq_of_row[r]].end(), &out[r * nv * dv],
                                                               &out[(r + 1) * nv * dv]);
  }
  // Reference per sequence alone: conv over the whole sequence, then each v-head's delta rule
  // with k-head h % nk (tiled).
  double max_err = 0;
  for (int s = 0; s < 2; ++s) {
    const int T = lens[s];
    std::vector<float> conv(size_t(T) * C), st(size_t(K - 1) * C, 0);
    const auto rows = iota_rows(T);
    cpu::conv1d_causal_silu({xs[s].data(), C}, w.data(), C, K, st.data(), {conv.data(), C}, rows);
    for (int h = 0; h < nv; ++h) {
      const int kh = h % nk;
      HeadInputs in(0, dk, dv, rng);
      in.T = T;
      for (int t = 0; t < T; ++t) {
        const float* row = &conv[size_t(t) * C];
        std::vector<float> qq(row + kh * dk, row + (kh + 1) * dk), kk(row + nk * dk + kh * dk, row + nk * dk + (kh + 1) * dk);
        l2n(qq.data(), dk, 1.0f / std::sqrt(float(dk)));
        l2n(kk.data(), dk, 1.0f);
        in.q.insert(in.q.end(), qq.begin(), qq.end());
        in.k.insert(in.k.end(), kk.begin(), kk.end());
        in.v.insert(in.v.end(), row + 2 * nk * dk + h * dv, row + 2 * nk * dk + (h + 1) * dv);
        in.g.push_back(gs[s][size_t(t) * nv + h]);
        in.beta.push_back(bs[s][size_t(t) * nv + h]);
      }
      std::vector<double> S(size_t(dk) * dv, 0), ref;
      reference_delta(in, S, ref);
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < dv; ++j)
          max_err = std::max(max_err, std::fabs(outs[s][size_t(t) * nv * dv + h * dv + j] - ref[size_t(t) * dv + j]));
    }
  }
  EXPECT_LT(max_err, 5e-5) << "seed " << seed;
  // The unused slot (1) is untouched.
  EXPECT_EQ(conv_state[size_t(K - 1) * C], 7.0f);
  EXPECT_EQ(delta_state[size_t(nv) * dk * dv], 7.0f);
}

TEST_F(HybridBackendOps, RopePartial) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int hd = 256, rd = 64, heads = 2;
  const float theta = 1e7f;
  std::vector<int32_t> pos_next{0, 1000};
  plan_step({0, 1, 1}, pos_next);  // positions 0, 1000, 1001
  auto x = randn(size_t(3) * heads * hd, rng);
  auto y = x;
  ASSERT_TRUE(be_.rope_partial(Tensor::matrix(y.data(), DType::F32, 3, heads * hd), hd, rd, theta, true).is_ok());
  for (int r = 0; r < 3; ++r)
    for (int h = 0; h < heads; ++h) {
      const float* a = &x[(size_t(r) * heads + h) * hd];
      const float* b = &y[(size_t(r) * heads + h) * hd];
      for (int i = 0; i < rd / 2; ++i) {
        const double ang = positions_[r] * std::pow(double(theta), -2.0 * i / rd);
        EXPECT_NEAR(b[i], a[i] * std::cos(ang) - a[i + rd / 2] * std::sin(ang), 1e-4) << seed;
        EXPECT_NEAR(b[i + rd / 2], a[i] * std::sin(ang) + a[i + rd / 2] * std::cos(ang), 1e-4) << seed;
      }
      for (int i = rd; i < hd; ++i) EXPECT_EQ(b[i], a[i]);
    }
  ASSERT_TRUE(be_.end_step().is_ok());
}

}  // namespace
}  // namespace hs
