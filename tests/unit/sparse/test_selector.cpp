// tests/unit/sparse/test_selector.cpp — selection invariants, Quest's bound, and finding a
// planted needle chunk at 16K tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "backend/cpu_sparse_kernels.h"
#include "sparse/quest.h"
#include "sparse/selector.h"
#include "sparse/sketch_fitter.h"
#include "sparse/sketch_store.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::random_orthonormal;
using test::randn;
using test::sparse_seed;

// Checks the selection rules for `chunks` against per-candidate `scores` (empty: unscored).
void check_selection(const std::vector<int32_t>& chunks, std::span<const float> scores, int32_t n_tokens,
                     const SparseConfig& cfg) {
  const int32_t n_chunks = n_chunks_of(n_tokens, cfg.chunk_tokens);
  ASSERT_TRUE(std::is_sorted(chunks.begin(), chunks.end()));
  ASSERT_EQ(std::adjacent_find(chunks.begin(), chunks.end()), chunks.end()) << "duplicate chunk";
  if (!chunks.empty()) {
    ASSERT_GE(chunks.front(), 0);
    ASSERT_LT(chunks.back(), n_chunks);
  }
  const std::set<int32_t> sel(chunks.begin(), chunks.end());
  for (int32_t t = 0; t < std::min(n_tokens, cfg.sink_tokens); ++t)
    ASSERT_TRUE(sel.count(t / cfg.chunk_tokens)) << "sink token " << t;
  for (int32_t t = std::max(0, n_tokens - cfg.window_tokens); t < n_tokens; ++t)
    ASSERT_TRUE(sel.count(t / cfg.chunk_tokens)) << "window token " << t;
  ASSERT_LE(static_cast<int32_t>(chunks.size()), cfg.max_selected_chunks());
  const auto [first, last] = candidate_range(n_tokens, cfg);
  int32_t picked = 0;
  float worst_picked = INFINITY, best_left = -INFINITY;
  for (int32_t c = first; c < last; ++c) {
    const float s = scores.empty() ? 0.0f : (std::isnan(scores[c - first]) ? -INFINITY : scores[c - first]);
    if (sel.count(c)) {
      ++picked;
      worst_picked = std::min(worst_picked, s);
    } else {
      best_left = std::max(best_left, s);
    }
  }
  ASSERT_EQ(picked, candidates_fit(n_tokens, cfg) ? last - first : std::min(last - first, cfg.budget_chunks()));
  // In tokens: never more than the budget, sinks and window allow (rounded out to chunks).
  int64_t sel_tokens = 0;
  for (int32_t c : chunks) sel_tokens += std::min(n_tokens, (c + 1) * cfg.chunk_tokens) - c * cfg.chunk_tokens;
  const int32_t C = cfg.chunk_tokens;
  ASSERT_LE(sel_tokens, cfg.budget_tokens + (cfg.sink_tokens + C - 1) / C * C + (cfg.window_tokens / C + 2) * C);
  if (picked > 0 && picked < last - first) {
    ASSERT_GE(worst_picked, best_left) << "a better chunk was left out";
  }
}

TEST(SparseSelector, InvariantsOnRandomScores) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 1 << 20);
  for (int iter = 0; iter < 2000; ++iter) {
    SparseConfig cfg;
    const int Cs[] = {1, 4, 8, 16};
    cfg.chunk_tokens = Cs[pick(rng) % 4];
    cfg.budget_tokens = pick(rng) % 300;
    cfg.sink_tokens = pick(rng) % 40;
    cfg.window_tokens = pick(rng) % 100;
    ASSERT_TRUE(cfg.validate(16).is_ok());
    const int32_t n = pick(rng) % 2000;
    const auto [first, last] = candidate_range(n, cfg);
    ASSERT_LE(first, last);
    std::vector<float> scores(last - first);
    std::normal_distribution<float> nd;
    for (float& s : scores) {
      const int kind = pick(rng) % 50;
      // some NaN, ties, infinities, and a heavy tail (as real scores: few high, most low)
      s = kind == 0 ? NAN : kind == 1 ? 0.5f : kind == 2 ? -INFINITY : kind == 3 ? INFINITY
          : kind < 10 ? 20.0f * nd(rng) : nd(rng);
    }
    std::vector<int32_t> chunks;
    select_top_chunks(scores, n, cfg, chunks);
    SCOPED_TRACE(testing::Message() << "iter " << iter << " n " << n << " C " << cfg.chunk_tokens << " budget "
                                    << cfg.budget_tokens << " S " << cfg.sink_tokens << " W " << cfg.window_tokens);
    check_selection(chunks, scores, n, cfg);
    // Exactly the set a full sort gives (score descending, NaN last, ties to the later chunk).
    std::vector<int32_t> want;
    for (int32_t c = 0; c < first; ++c) want.push_back(c);
    std::vector<int32_t> order(last - first);
    for (int32_t i = 0; i < last - first; ++i) order[i] = first + i;
    auto key = [&](int32_t c) { return std::isnan(scores[c - first]) ? -INFINITY : scores[c - first]; };
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key(a) != key(b) ? key(a) > key(b) : a > b; });
    const int32_t k = candidates_fit(n, cfg) ? last - first : std::min(last - first, cfg.budget_chunks());
    std::vector<int32_t> top(order.begin(), order.begin() + k);
    std::sort(top.begin(), top.end());
    want.insert(want.end(), top.begin(), top.end());
    for (int32_t c = last; c < n_chunks_of(n, cfg.chunk_tokens); ++c) want.push_back(c);
    ASSERT_EQ(chunks, want);
  }
  SparseConfig bad;
  bad.chunk_tokens = 5;
  EXPECT_FALSE(bad.validate(16).is_ok());
}

// Keys of one head; blocks shuffled.
struct Context {
  int hd, P, n;
  std::vector<int32_t> blocks;
  std::vector<float> keys;  // [n][head_dim]
};

Context make_context(std::mt19937& rng, int hd, int P, int n) {
  Context c{hd, P, n, {}, randn(rng, static_cast<size_t>(n) * hd)};
  c.blocks.resize((n + P - 1) / P);
  for (size_t i = 0; i < c.blocks.size(); ++i) c.blocks[i] = static_cast<int32_t>(i);
  std::shuffle(c.blocks.begin(), c.blocks.end(), rng);
  return c;
}

TEST(SparseSelector, AllChunksWhenBudgetCoversContext) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, P = 16, G = 3;
  std::uniform_int_distribution<int> len(1, 3000);
  const SketchBasis basis = SketchBasis::identity(1, 1, hd, 16);
  for (int iter = 0; iter < 20; ++iter) {
    const int n = len(rng);
    Context ctx = make_context(rng, hd, P, n);
    SketchStore sketches(cpu_sparse_kernels(), basis, P, static_cast<int32_t>(ctx.blocks.size()));
    QuestStore quest(1, 1, hd, P, 16, static_cast<int32_t>(ctx.blocks.size()));
    for (int t = 0; t < n; ++t) {
      sketches.write(ctx.blocks, 0, 0, t, ctx.keys.data() + t * hd);
      quest.write(ctx.blocks, 0, 0, t, ctx.keys.data() + t * hd);
    }
    SparseConfig cfg;
    cfg.budget_tokens = n + (iter % 5) * 7;
    cfg.sink_tokens = iter % 3 == 0 ? 0 : 16;
    cfg.window_tokens = iter % 4 == 0 ? 0 : 64;
    auto sk = SketchTopKSelector::create(sketches, cfg);
    auto qs = QuestSelector::create(quest, cfg);
    SparseConfig mass_cfg = cfg;
    mass_cfg.chunk_mass_scale = 0.125f;
    auto sm = SketchTopKSelector::create(sketches, mass_cfg);
    ASSERT_TRUE(sk.is_ok() && qs.is_ok() && sm.is_ok());
    const auto q = randn(rng, G * hd);
    SelectInput in{.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.blocks, .n_tokens = n};
    const ChunkSelector* selectors[] = {sk->get(), qs->get(), sm->get()};
    for (const ChunkSelector* sel : selectors) {
      std::vector<int32_t> chunks;
      sel->select(in, chunks);
      ASSERT_EQ(static_cast<int>(chunks.size()), (n + 15) / 16) << sel->name() << " n " << n;
      for (size_t i = 0; i < chunks.size(); ++i) ASSERT_EQ(chunks[i], static_cast<int32_t>(i));
    }
  }
  SparseConfig wrong_c;
  wrong_c.chunk_tokens = 8;
  QuestStore quest(1, 1, hd, P, 16, 4);
  EXPECT_FALSE(QuestSelector::create(quest, wrong_c).is_ok());
}

// One step's selections at once (select_batch: all scoring in one pooled pass, each top-k
// run by the task that finishes its item) give exactly what select() gives one by one:
// several kv heads and sequences of different lengths, some under the budget, both selectors.
TEST(SparseSelector, BatchEqualsOneByOne) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, P = 16, G = 3, H = 2, r = 16;
  SketchBasis basis = SketchBasis::zeros(1, H, hd, r);
  for (int h = 0; h < H; ++h) {
    const auto U = test::random_orthonormal(rng, hd, r);
    std::copy(U.begin(), U.end(), basis.basis[0].begin() + static_cast<size_t>(h) * hd * r);
  }
  std::uniform_int_distribution<int> len(1, 9000);
  std::vector<Context> ctxs;
  int32_t n_blocks = 0;
  for (int sq = 0; sq < 4; ++sq) {
    ctxs.push_back(make_context(rng, hd, P, len(rng)));
    for (auto& b : ctxs.back().blocks) b += n_blocks;  // disjoint pages per sequence
    n_blocks += static_cast<int32_t>(ctxs.back().blocks.size());
  }
  SketchStore sketches(cpu_sparse_kernels(), basis, P, n_blocks, SketchElem::kInt8);
  QuestStore quest(1, H, hd, P, 16, n_blocks);
  for (const Context& c : ctxs)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < c.n; ++t) {
        const float* k = c.keys.data() + t * hd;  // both heads see the same keys, different bases
        sketches.write(c.blocks, 0, h, t, k);
        quest.write(c.blocks, 0, h, t, k);
      }
  SparseConfig cfg;
  cfg.budget_tokens = 512;
  cfg.window_tokens = 64;
  auto sk = SketchTopKSelector::create(sketches, cfg);
  auto qs = QuestSelector::create(quest, cfg);
  SparseConfig mass_cfg = cfg;
  mass_cfg.chunk_mass_scale = 0.125f;
  auto sm = SketchTopKSelector::create(sketches, mass_cfg);
  ASSERT_TRUE(sk.is_ok() && qs.is_ok() && sm.is_ok());
  std::vector<std::vector<float>> qs_data;
  std::vector<SelectInput> ins;
  for (const Context& c : ctxs)
    for (int h = 0; h < H; ++h) {
      qs_data.push_back(randn(rng, G * hd));
      ins.push_back(SelectInput{.layer = 0, .kv_head = h, .q = nullptr, .n_q = G, .blocks = c.blocks, .n_tokens = c.n});
    }
  for (size_t i = 0; i < ins.size(); ++i) ins[i].q = qs_data[i].data();
  ThreadPool pool(3);
  const ChunkSelector* selectors[] = {sk->get(), qs->get(), sm->get()};
  for (const ChunkSelector* sel : selectors) {
    BatchSelectScratch scratch;
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<std::vector<int32_t>> batch(ins.size());
      sel->select_batch(ins, batch, scratch, p);
      for (size_t i = 0; i < ins.size(); ++i) {
        std::vector<int32_t> one;
        sel->select(ins[i], one);
        ASSERT_EQ(batch[i], one) << sel->name() << " item " << i << " n " << ins[i].n_tokens;
      }
    }
  }
}

// The group-mass score ranks chunks by Σ_g (head g's softmax mass on the chunk) / (g's total,
// sinks and window included), from the sketch scores: against a double reference over the
// stored sketches, no chunk left out may beat a picked one by more than rounding.
TEST(SparseSelector, GroupMassRanksLikeTheReference) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, P = 16, G = 4, r = 16;
  SketchBasis basis = SketchBasis::zeros(1, 1, hd, r);
  const auto U = test::random_orthonormal(rng, hd, r);
  std::copy(U.begin(), U.end(), basis.basis[0].begin());
  std::uniform_int_distribution<int> len(2000, 6000);
  for (int trial = 0; trial < 4; ++trial) {
    Context ctx = make_context(rng, hd, P, len(rng));
    SketchStore sketches(cpu_sparse_kernels(), basis, P, static_cast<int32_t>(ctx.blocks.size()), SketchElem::kF32);
    for (int t = 0; t < ctx.n; ++t) sketches.write(ctx.blocks, 0, 0, t, ctx.keys.data() + t * hd);
    SparseConfig cfg;
    cfg.budget_tokens = 256;
    cfg.window_tokens = 64;
    cfg.chunk_mass_scale = 0.5f + trial * 0.5f;  // flat to sharp
    auto sel = SketchTopKSelector::create(sketches, cfg);
    ASSERT_TRUE(sel.is_ok());
    // Heads of different scales: the normalisation must not let the loudest head decide.
    auto q = randn(rng, G * hd);
    for (int g = 0; g < G; ++g)
      for (int d = 0; d < hd; ++d) q[g * hd + d] *= 0.5f + 1.5f * g;
    std::vector<float> q_hat(G * r), bias(G);
    sketches.project(0, 0, q.data(), G, q_hat.data(), bias.data());
    std::vector<double> share(n_chunks_of(ctx.n, P), 0.0);  // [n_chunks] reference score (C = P)
    for (int g = 0; g < G; ++g) {
      std::vector<double> logit(ctx.n);
      double mx = -1e300, total = 0;
      for (int t = 0; t < ctx.n; ++t) {
        std::vector<float> s(r);
        sketches.read(ctx.blocks, 0, 0, t, s.data());
        double dot = bias[g];
        for (int j = 0; j < r; ++j) dot += static_cast<double>(q_hat[g * r + j]) * s[j];
        logit[t] = cfg.chunk_mass_scale * dot;
        mx = std::max(mx, logit[t]);
      }
      for (int t = 0; t < ctx.n; ++t) total += std::exp(logit[t] - mx);
      for (int t = 0; t < ctx.n; ++t) share[t / P] += std::exp(logit[t] - mx) / total;
    }
    std::vector<int32_t> chunks;
    (*sel)->select(SelectInput{.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.blocks,
                               .n_tokens = ctx.n},
                   chunks);
    const auto [first, last] = candidate_range(ctx.n, cfg);
    // The selection rules against the reference scores, with a rounding margin.
    const std::set<int32_t> picked(chunks.begin(), chunks.end());
    double worst_picked = 1e300, best_left = -1e300;
    for (int32_t c = first; c < last; ++c) {
      if (picked.count(c)) worst_picked = std::min(worst_picked, share[c]);
      else best_left = std::max(best_left, share[c]);
    }
    EXPECT_GE(worst_picked, best_left - 1e-3 * best_left) << "trial " << trial;
    check_selection(chunks, {}, ctx.n, cfg);  // sinks, window, count
  }
}

// Quest's per-chunk bound is >= q_g·k for every key of the chunk and every head of the group.
TEST(SparseSelector, QuestBoundIsAnUpperBound) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  for (int C : {4, 8, 16}) {
    const int hd = 64, P = 16, G = 4, n = 1000 + C * 3 + 1;  // a partial last chunk
    Context ctx = make_context(rng, hd, P, n);
    // Per-dimension offsets and scales so min/max differ in sign and size.
    const auto off = randn(rng, hd, 2.0f);
    for (int t = 0; t < n; ++t)
      for (int d = 0; d < hd; ++d) ctx.keys[t * hd + d] = ctx.keys[t * hd + d] * (0.2f + (d % 7) * 0.5f) + off[d];
    QuestStore quest(2, 2, hd, P, C, static_cast<int32_t>(ctx.blocks.size()));
    for (int t = 0; t < n; ++t) quest.write(ctx.blocks, 1, 1, t, ctx.keys.data() + t * hd);
    const int n_chunks = (n + C - 1) / C;
    for (int trial = 0; trial < 20; ++trial) {
      const auto q = randn(rng, G * hd, 1.0f + trial);
      std::vector<float> bound(n_chunks);
      quest.chunk_bounds(ctx.blocks, 1, 1, q.data(), G, 0, n_chunks, bound.data());
      for (int c = 0; c < n_chunks; ++c) {
        double true_max = -1e30;
        for (int t = c * C; t < std::min(n, (c + 1) * C); ++t)
          for (int g = 0; g < G; ++g) {
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[g * hd + d]) * ctx.keys[t * hd + d];
            true_max = std::max(true_max, dot);
          }
        ASSERT_GE(bound[c], true_max - 1e-4 * (1 + std::fabs(true_max))) << "C " << C << " chunk " << c;
      }
    }
    // The last (partial) chunk's rows really are the elementwise extremes of its keys.
    const float* mm = quest.chunk_minmax(ctx.blocks, 1, 1, n_chunks - 1);
    for (int d = 0; d < hd; ++d) {
      float mn = INFINITY, mx = -INFINITY;
      for (int t = (n_chunks - 1) * C; t < n; ++t) {
        mn = std::min(mn, ctx.keys[t * hd + d]);
        mx = std::max(mx, ctx.keys[t * hd + d]);
      }
      ASSERT_EQ(mm[d], mn);
      ASSERT_EQ(mm[hd + d], mx);
    }
  }
}

// 16K tokens of keys in a planted low-rank subspace (as real keys are), a basis fitted from a
// sample of them, and one "needle" chunk in the middle whose keys align with a query head:
// the sketch selector must rank it among the top 4 of ~1000 candidate chunks.
TEST(SparseSelector, SketchFindsNeedleAt16K) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, r = 16, P = 16, n = 16384, G = 3;
  const auto U = random_orthonormal(rng, hd, r);
  const auto mu = randn(rng, hd, 0.1f);
  std::normal_distribution<float> nd;
  Context ctx = make_context(rng, hd, P, n);
  for (int t = 0; t < n; ++t) {
    float* k = ctx.keys.data() + static_cast<size_t>(t) * hd;
    for (int d = 0; d < hd; ++d) k[d] = mu[d] + 0.05f * nd(rng);
    for (int j = 0; j < r; ++j) {
      const float z = nd(rng);
      for (int d = 0; d < hd; ++d) k[d] += z * U[d * r + j];
    }
  }
  SketchFitter fitter(1, 1, hd);
  fitter.add_keys(0, 0, ctx.keys.data(), 4096, hd);  // fit on the first quarter only
  auto basis = fitter.fit({.rank = r});
  ASSERT_TRUE(basis.is_ok()) << basis.status().to_string();

  // Query heads: random. Random keys score q̂_g·s ~ N(0, |Uᵀq_g|²) (plus the small q_g·mu), so
  // their max over 16K tokens and G heads is about 4.5 max_g |Uᵀq_g|. The needle's keys point
  // along U Uᵀ q_1 with a score of 8 max_g |Uᵀq_g| for head 1 (a key 2-4× the typical norm).
  const auto q = randn(rng, G * hd);
  std::vector<double> dir(hd, 0.0);  // U Uᵀ q_1 / |Uᵀ q_1|
  double max_proj = 0, proj1 = 0;
  for (int g = 0; g < G; ++g) {
    double n2 = 0;
    for (int j = 0; j < r; ++j) {
      double c = 0;
      for (int d = 0; d < hd; ++d) c += static_cast<double>(U[d * r + j]) * q[g * hd + d];
      n2 += c * c;
      if (g == 1)
        for (int d = 0; d < hd; ++d) dir[d] += c * U[d * r + j];
    }
    max_proj = std::max(max_proj, std::sqrt(n2));
    if (g == 1) proj1 = std::sqrt(n2);
  }
  for (double& x : dir) x /= proj1;
  const int needle = 517;  // chunk id, far from sinks and window
  auto plant = [&](double score, float noise) {
    for (int t = needle * P; t < (needle + 1) * P; ++t)
      for (int d = 0; d < hd; ++d)
        ctx.keys[t * hd + d] = mu[d] + static_cast<float>(score / proj1 * dir[d]) + noise * nd(rng);
  };
  plant(8.0 * max_proj, 0.05f);

  SketchStore sketches(cpu_sparse_kernels(), *basis, P, static_cast<int32_t>(ctx.blocks.size()));
  for (int t = 0; t < n; ++t) sketches.write(ctx.blocks, 0, 0, t, ctx.keys.data() + t * hd);
  SparseConfig cfg;
  cfg.budget_tokens = 4 * P;
  auto sel = SketchTopKSelector::create(sketches, cfg);
  ASSERT_TRUE(sel.is_ok());
  ThreadPool pool(2);
  SelectScratch scratch;
  SelectInput in{.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.blocks, .n_tokens = n,
                 .pool = &pool, .scratch = &scratch};
  std::vector<int32_t> chunks;
  (*sel)->select(in, chunks);
  EXPECT_TRUE(std::binary_search(chunks.begin(), chunks.end(), needle)) << "needle chunk not selected";
  EXPECT_EQ(static_cast<int>(chunks.size()), 1 + 4 + 256 / P);  // sinks + budget + window
  const std::vector<float> scores = scratch.scores;
  check_selection(chunks, scores, n, cfg);

  // Quest finds a needle too once it clears the chunk-wise bounds, which for random chunks
  // sit near q·mu + 0.9 Σ_d |q_d| (~45 here): a needle scoring 20 max_g |Uᵀq_g| does.
  QuestStore quest(1, 1, hd, P, P, static_cast<int32_t>(ctx.blocks.size()));
  plant(20.0 * max_proj, 0.0f);
  for (int t = 0; t < n; ++t) quest.write(ctx.blocks, 0, 0, t, ctx.keys.data() + t * hd);
  auto qsel = QuestSelector::create(quest, cfg);
  ASSERT_TRUE(qsel.is_ok());
  (*qsel)->select(in, chunks);
  EXPECT_TRUE(std::binary_search(chunks.begin(), chunks.end(), needle)) << "quest: needle chunk not selected";
}

// The default chunk size is the smallest power of two dividing the page whose K|V piece of one
// kv head reaches the 4 KiB fetch floor; the page itself when no smaller one does.
TEST(SparseSelector, AutoChunkIsTheSmallestPieceOfFourKiB) {
  EXPECT_EQ(auto_chunk_tokens(kv_token_bytes(KvDtype::kF16, 256), 16), 4);   // Gemma 3: 1 KiB per token
  EXPECT_EQ(auto_chunk_tokens(kv_token_bytes(KvDtype::kF16, 64), 16), 16);   // SmolLM2: 256 B per token
  EXPECT_EQ(auto_chunk_tokens(kv_token_bytes(KvDtype::kF32, 256), 16), 2);
  EXPECT_EQ(auto_chunk_tokens(kv_token_bytes(KvDtype::kInt8, 256), 16), 8);  // 512 B + scales
  EXPECT_EQ(auto_chunk_tokens(kv_token_bytes(KvDtype::kInt8, 64), 16), 16);
  EXPECT_EQ(auto_chunk_tokens(8192, 16), 1);
  EXPECT_EQ(auto_chunk_tokens(4096, 16), 1);
  EXPECT_EQ(auto_chunk_tokens(4095, 16), 2);
  EXPECT_EQ(auto_chunk_tokens(1, 16), 16);
  EXPECT_EQ(auto_chunk_tokens(1, 8), 8);
  for (int64_t b = 1; b < 10000; b += 97) {
    const int32_t c = auto_chunk_tokens(b, 16);
    EXPECT_EQ(16 % c, 0);
    if (c < 16) { EXPECT_GE(c * b, kMinFetchPieceBytes); }
    if (c > 1) { EXPECT_LT((c / 2) * b, kMinFetchPieceBytes); }
  }
}

}  // namespace
}  // namespace hs
