// tests/unit/sparse/test_oracle_recall.cpp — oracle_mass_recall: the mass-ranked oracle is the
// best selection of its size, the exact-max oracle follows the selectors' rule on exact scores,
// and both are 1 when the budget covers the context; the decode-path OracleSelector keeps the
// mass oracle's recall.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "backend/cpu_sparse_kernels.h"
#include "sparse/oracle_selector.h"
#include "sparse/selector.h"
#include "backend/cpu_sparse_attention.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::PagedContext;
using test::randn;
using test::sparse_seed;

void fill_keys(PagedContext& ctx, std::mt19937& rng) {
  test::fill_hot_keys(ctx, rng, 0.02, [](int32_t, const float*, const float*) {});
}

TEST(SparseOracleRecall, MassOracleIsTheBestSelectionOfItsSize) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, G = 3;
  SparseConfig cfg;
  cfg.chunk_tokens = 16;
  cfg.sink_tokens = 16;
  cfg.window_tokens = 64;
  std::uniform_int_distribution<int32_t> len(600, 4000);
  std::uniform_real_distribution<float> scale_d(0.1f, 0.6f);
  for (int iter = 0; iter < 8; ++iter) {
    const int32_t n = len(rng);
    cfg.budget_tokens = std::uniform_int_distribution<int32_t>(1, 24)(rng) * 16;
    KvGeometry g{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16,
                 .dtype = iter % 2 ? KvDtype::kF16 : KvDtype::kF32};
    PagedContext ctx(g, n, rng);
    fill_keys(ctx, rng);
    const auto q = randn(rng, G * hd);
    const float scale = scale_d(rng);
    std::vector<int32_t> max_sel, mass_sel;
    const OracleRecall o = oracle_mass_recall(q.data(), G, ctx.view(), 0, n, scale, cfg, &max_sel, &mass_sel);
    SCOPED_TRACE("n=" + std::to_string(n) + " budget=" + std::to_string(cfg.budget_tokens));
    ASSERT_FALSE(candidates_fit(n, cfg));

    // Both selections follow the rule: sinks + window + budget_chunks() candidates, ascending.
    const auto [first, last] = candidate_range(n, cfg);
    const size_t want_size = static_cast<size_t>(first + cfg.budget_chunks() + (n_chunks_of(n, 16) - last));
    ASSERT_EQ(max_sel.size(), want_size);
    ASSERT_EQ(mass_sel.size(), want_size);
    EXPECT_TRUE(std::is_sorted(mass_sel.begin(), mass_sel.end()));
    for (int32_t c = 0; c < first; ++c) EXPECT_TRUE(std::binary_search(mass_sel.begin(), mass_sel.end(), c));
    for (int32_t c = last; c < n_chunks_of(n, 16); ++c)
      EXPECT_TRUE(std::binary_search(mass_sel.begin(), mass_sel.end(), c));

    // The reported recalls are the recalls of the reported selections.
    EXPECT_NEAR(o.mass, attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, mass_sel, 16), 1e-9);
    EXPECT_NEAR(o.exact_max, attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, max_sel, 16), 1e-9);
    EXPECT_LT(o.mass, 1.0);
    EXPECT_LE(o.exact_max, o.mass + 1e-9);

    // The exact-max oracle is select_top_chunks on max_t max_g q_g·k_t computed here.
    std::vector<float> exact(last - first, -INFINITY);
    std::vector<float> k(hd), v(hd);
    for (int32_t t = first * 16; t < last * 16; ++t) {
      ctx.cache.read(ctx.seq, 0, 0, t, k.data(), v.data());
      for (int gq = 0; gq < G; ++gq) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[gq * hd + d]) * k[d];
        exact[t / 16 - first] = std::max(exact[t / 16 - first], static_cast<float>(dot * scale));
      }
    }
    std::vector<int32_t> want_max;
    select_top_chunks(exact, n, cfg, want_max);
    EXPECT_EQ(max_sel, want_max);

    // No other selection of the same size does better: random ones (the rule with random
    // scores) and every neighbour of the oracle made by swapping one chosen candidate chunk
    // for one left out.
    std::uniform_real_distribution<float> ud;
    for (int r = 0; r < 20; ++r) {
      std::vector<float> s(last - first);
      for (float& x : s) x = ud(rng);
      std::vector<int32_t> other;
      select_top_chunks(s, n, cfg, other);
      ASSERT_EQ(other.size(), want_size);
      EXPECT_LE(attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, other, 16), o.mass + 1e-9);
    }
    std::vector<int32_t> in, out;
    for (int32_t c = first; c < last; ++c)
      (std::binary_search(mass_sel.begin(), mass_sel.end(), c) ? in : out).push_back(c);
    for (int r = 0; r < 20 && !out.empty(); ++r) {
      std::set<int32_t> swapped(mass_sel.begin(), mass_sel.end());
      swapped.erase(in[std::uniform_int_distribution<size_t>(0, in.size() - 1)(rng)]);
      swapped.insert(out[std::uniform_int_distribution<size_t>(0, out.size() - 1)(rng)]);
      const std::vector<int32_t> other(swapped.begin(), swapped.end());
      EXPECT_LE(attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, other, 16), o.mass + 1e-9);
    }
  }
}

TEST(SparseOracleRecall, BudgetCoveringTheContextIsOne) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 32, G = 2;
  const int32_t n = 700;
  KvGeometry g{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16, .dtype = KvDtype::kF32};
  PagedContext ctx(g, n, rng);
  fill_keys(ctx, rng);
  const auto q = randn(rng, G * hd);
  SparseConfig cfg;
  cfg.window_tokens = 64;
  cfg.budget_tokens = n;
  std::vector<int32_t> max_sel, mass_sel;
  const OracleRecall o = oracle_mass_recall(q.data(), G, ctx.view(), 0, n, 0.3f, cfg, &max_sel, &mass_sel);
  EXPECT_EQ(o.exact_max, 1.0);
  EXPECT_EQ(o.mass, 1.0);
  std::vector<int32_t> all(n_chunks_of(n, cfg.chunk_tokens));
  for (size_t c = 0; c < all.size(); ++c) all[c] = static_cast<int32_t>(c);
  EXPECT_EQ(max_sel, all);
  EXPECT_EQ(mass_sel, all);
  // One chunk short of covering the candidates: strictly below 1.
  const auto [first, last] = candidate_range(n, cfg);
  cfg.budget_tokens = (last - first - 1) * cfg.chunk_tokens;
  const OracleRecall short_one = oracle_mass_recall(q.data(), G, ctx.view(), 0, n, 0.3f, cfg);
  EXPECT_LT(short_one.mass, 1.0);
  EXPECT_GT(short_one.mass, 0.0);
}

// OracleSelector ranks by the exact group mass in the decode path: its selection keeps the
// same mass as the eval's mass oracle (ties aside, the same chunks), one by one and batched.
TEST(SparseOracleRecall, OracleSelectorKeepsTheMassOraclesRecall) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, G = 4;
  SparseConfig cfg;
  cfg.budget_tokens = 256;
  cfg.window_tokens = 64;
  const float scale = 0.25f;
  for (int iter = 0; iter < 4; ++iter) {
    const int32_t n = std::uniform_int_distribution<int32_t>(1000, 5000)(rng);
    KvGeometry g{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16, .dtype = KvDtype::kF32};
    PagedContext ctx(g, n, rng);
    fill_keys(ctx, rng);
    auto sel = OracleSelector::create(cpu_sparse_kernels(), ctx.cache, scale, cfg);
    ASSERT_TRUE(sel.is_ok()) << sel.status().to_string();
    const auto q = randn(rng, G * hd);
    const SelectInput in{.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.seq.blocks, .n_tokens = n};
    std::vector<int32_t> one;
    (*sel)->select(in, one);
    std::vector<std::vector<int32_t>> batch(1);
    BatchSelectScratch scratch;
    ThreadPool pool(2);
    (*sel)->select_batch(std::span<const SelectInput>(&in, 1), batch, scratch, &pool);
    EXPECT_EQ(one, batch[0]);
    const OracleRecall oracle = oracle_mass_recall(q.data(), G, ctx.view(), 0, n, scale, cfg);
    const double got = attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, one, cfg.chunk_tokens);
    EXPECT_NEAR(got, oracle.mass, 1e-5) << "n " << n;
  }
  // Scaled KV dtypes have no plain rows to read.
  KvGeometry g8{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16, .dtype = KvDtype::kInt8};
  KvCache int8_cache(g8, 4);
  EXPECT_FALSE(OracleSelector::create(cpu_sparse_kernels(), int8_cache, scale, cfg).is_ok());
}

}  // namespace
}  // namespace hs
