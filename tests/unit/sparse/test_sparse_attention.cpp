// tests/unit/sparse/test_sparse_attention.cpp — sparse attention over selected chunks vs
// dense attention and a double-precision reference; attention mass recall.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu_sparse_kernels.h"
#include "sparse/selector.h"
#include "sparse/sketch_store.h"
#include "backend/cpu_sparse_attention.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::PagedContext;
using test::randn;
using test::sparse_seed;

// Fills (layer 0, kv_head) of a context with N(0, 1) keys and values.
void fill(PagedContext& ctx, std::mt19937& rng, int kv_head) {
  const int hd = ctx.cache.geometry().head_dim;
  for (int32_t t = 0; t < ctx.seq.n_tokens; ++t) {
    const auto k = randn(rng, hd), v = randn(rng, hd);
    ctx.cache.write(ctx.seq, 0, kv_head, t, k.data(), v.data());
  }
}

// Softmax attention in double over the tokens of `chunks` (out [G][head_dim]).
std::vector<double> reference(const PagedContext& ctx, int kv_head, const float* q, int G, float scale,
                              const std::vector<int32_t>& chunks, int C) {
  const int hd = ctx.cache.geometry().head_dim;
  const int32_t n = ctx.seq.n_tokens;
  std::vector<double> out(static_cast<size_t>(G) * hd, 0.0);
  std::vector<float> k(hd), v(hd);
  for (int g = 0; g < G; ++g) {
    std::vector<std::pair<double, int32_t>> logits;
    for (int32_t c : chunks)
      for (int32_t t = c * C; t < std::min(n, (c + 1) * C); ++t) {
        ctx.cache.read(ctx.seq, 0, kv_head, t, k.data(), v.data());
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[g * hd + d]) * k[d];
        logits.push_back({dot * scale, t});
      }
    if (logits.empty()) continue;
    double mx = -1e300, total = 0;
    for (auto& [l, t] : logits) mx = std::max(mx, l);
    for (auto& [l, t] : logits) {
      const double p = std::exp(l - mx);
      total += p;
      ctx.cache.read(ctx.seq, 0, kv_head, t, k.data(), v.data());
      for (int d = 0; d < hd; ++d) out[g * hd + d] += p * v[d];
    }
    for (int d = 0; d < hd; ++d) out[g * hd + d] /= total;
  }
  return out;
}

std::vector<int32_t> all_chunks(int32_t n, int C) {
  std::vector<int32_t> c(n_chunks_of(n, C));
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<int32_t>(i);
  return c;
}

TEST(SparseAttention, ChunkRanges) {
  std::vector<KeyRange> r;
  chunk_ranges(std::vector<int32_t>{0, 1, 2, 5, 7, 8}, 16, 140, 0, r);
  EXPECT_EQ(r, (std::vector<KeyRange>{{0, 48}, {80, 96}, {112, 140}}));  // last chunk clipped
  chunk_ranges(std::vector<int32_t>{0, 1, 2, 5}, 16, 1000, 20, r);
  EXPECT_EQ(r, (std::vector<KeyRange>{{0, 20}, {20, 40}, {40, 48}, {80, 96}}));
  chunk_ranges(std::vector<int32_t>{}, 16, 100, 0, r);
  EXPECT_TRUE(r.empty());
  chunk_ranges(std::vector<int32_t>{3, 9}, 16, 50, 0, r);  // chunk 9 lies past the context
  EXPECT_EQ(r, (std::vector<KeyRange>{{48, 50}}));
}

// Every chunk selected: the same kernels over the same ranges as dense attention, so the
// output is bitwise equal (one range vs attention_paged; 512-key splits vs the decoder's
// 512-key split-and-merge).
TEST(SparseAttention, AllChunksEqualsDenseBitwise) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(1, 5000);
  struct Case {
    int hd, G;
    KvDtype dt;
  };
  for (const Case& cs : {Case{64, 3, KvDtype::kF16}, Case{128, 8, KvDtype::kF32}, Case{256, 4, KvDtype::kF16},
                         Case{96, 2, KvDtype::kF32}}) {
    const int32_t n = len(rng);
    KvGeometry g{.n_layer = 1, .n_kv_heads = 2, .head_dim = cs.hd, .page_tokens = 16, .dtype = cs.dt};
    PagedContext ctx(g, n, rng);
    fill(ctx, rng, 1);
    const auto q = randn(rng, static_cast<size_t>(cs.G) * cs.hd);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cs.hd));
    const auto chunks = all_chunks(n, 16);
    std::vector<float> dense(cs.G * cs.hd), sparse(cs.G * cs.hd);
    SparseAttnScratch scratch;
    cpu::attention_paged(q.data(), cs.G, ctx.view(), 1, 0, n, scale, dense.data());
    sparse_attention_chunks(q.data(), cs.G, ctx.view(), 1, chunks, 16, n, 0, scale, sparse.data(), scratch);
    ASSERT_EQ(std::memcmp(dense.data(), sparse.data(), dense.size() * 4), 0) << "hd " << cs.hd << " n " << n;

    // The decoder's dense path: 512-key parts merged.
    std::vector<KeyRange> parts;
    for (int32_t b = 0; b < n; b += 512) parts.push_back({b, std::min(n, b + 512)});
    std::vector<float> dense_split(cs.G * cs.hd), sparse_split(cs.G * cs.hd);
    sparse_attention(q.data(), cs.G, ctx.view(), 1, parts, scale, dense_split.data(), scratch);
    sparse_attention_chunks(q.data(), cs.G, ctx.view(), 1, chunks, 16, n, 512, scale, sparse_split.data(), scratch);
    ASSERT_EQ(std::memcmp(dense_split.data(), sparse_split.data(), dense.size() * 4), 0);
    for (size_t i = 0; i < dense.size(); ++i) ASSERT_NEAR(sparse_split[i], dense[i], 1e-6 * (1 + std::fabs(dense[i])));
  }
}

TEST(SparseAttention, SubsetMatchesReference) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  for (int iter = 0; iter < 6; ++iter) {
    const int hd = iter % 2 ? 64 : 256, G = 1 + iter, C = iter % 3 == 0 ? 8 : 16;
    const int32_t n = 300 + 397 * iter;
    KvGeometry g{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16,
                 .dtype = iter % 2 ? KvDtype::kF16 : KvDtype::kF32};
    PagedContext ctx(g, n, rng);
    fill(ctx, rng, 0);
    const auto q = randn(rng, static_cast<size_t>(G) * hd, 0.3f);
    std::vector<int32_t> chunks;
    std::bernoulli_distribution keep(0.3);
    for (int32_t c = 0; c < n_chunks_of(n, C); ++c)
      if (keep(rng)) chunks.push_back(c);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> out(G * hd);
    SparseAttnScratch scratch;
    sparse_attention_chunks(q.data(), G, ctx.view(), 0, chunks, C, n, 100, scale, out.data(), scratch);
    const auto ref = reference(ctx, 0, q.data(), G, scale, chunks, C);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-5) << "iter " << iter << " i " << i;
  }
}

TEST(SparseAttention, MassRecall) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, G = 3, C = 16;
  const int32_t n = 1234;
  KvGeometry g{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16, .dtype = KvDtype::kF16};
  PagedContext ctx(g, n, rng);
  fill(ctx, rng, 0);
  const auto q = randn(rng, G * hd);
  const float scale = 0.125f;
  EXPECT_EQ(attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, all_chunks(n, C), C), 1.0);
  EXPECT_EQ(attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, {}, C), 0.0);
  // A split into two complementary halves: recalls add up to 1; each matches a direct sum.
  std::vector<int32_t> even, odd;
  for (int32_t c = 0; c < n_chunks_of(n, C); ++c) (c % 2 ? odd : even).push_back(c);
  const double re = attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, even, C);
  const double ro = attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, odd, C);
  EXPECT_NEAR(re + ro, 1.0, 1e-12);
  double want = 0;
  std::vector<float> k(hd), v(hd);
  for (int gq = 0; gq < G; ++gq) {
    std::vector<double> l(n);
    double mx = -1e300;
    for (int32_t t = 0; t < n; ++t) {
      ctx.cache.read(ctx.seq, 0, 0, t, k.data(), v.data());
      double dot = 0;
      for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[gq * hd + d]) * k[d];
      l[t] = dot * scale;
      mx = std::max(mx, l[t]);
    }
    double tot = 0, ev = 0;
    for (int32_t t = 0; t < n; ++t) {
      tot += std::exp(l[t] - mx);
      if ((t / C) % 2 == 0) ev += std::exp(l[t] - mx);
    }
    want += ev / tot / G;
  }
  EXPECT_NEAR(re, want, 1e-6);  // float logits and a polynomial exp against double here
}

// The whole path with budget >= context: selector (no scoring needed) -> sparse attention ==
// dense, and recall 1.
TEST(SparseAttention, PipelineWithBudgetCoveringContextIsDense) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, G = 3, P = 16;
  const int32_t n = 3001;
  KvGeometry g{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = P, .dtype = KvDtype::kF16};
  PagedContext ctx(g, n, rng);
  const SketchBasis basis = SketchBasis::identity(1, 1, hd, 16);
  SketchStore sketches(cpu_sparse_kernels(), basis, P, ctx.cache.pool().n_blocks());
  std::vector<float> k(hd), v(hd);
  for (int32_t t = 0; t < n; ++t) {
    k = randn(rng, hd);
    v = randn(rng, hd);
    ctx.cache.write(ctx.seq, 0, 0, t, k.data(), v.data());
    sketches.write(ctx.seq.blocks, 0, 0, t, k.data());
  }
  SparseConfig cfg;
  cfg.budget_tokens = 4096;
  auto sel = SketchTopKSelector::create(sketches, cfg);
  ASSERT_TRUE(sel.is_ok());
  const auto q = randn(rng, G * hd);
  std::vector<int32_t> chunks;
  (*sel)->select({.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.seq.blocks, .n_tokens = n}, chunks);
  ASSERT_EQ(chunks, all_chunks(n, cfg.chunk_tokens));
  std::vector<float> dense(G * hd), sparse(G * hd);
  SparseAttnScratch scratch;
  cpu::attention_paged(q.data(), G, ctx.view(), 0, 0, n, 0.125f, dense.data());
  sparse_attention_chunks(q.data(), G, ctx.view(), 0, chunks, cfg.chunk_tokens, n, 0, 0.125f, sparse.data(), scratch);
  EXPECT_EQ(dense, sparse);
  EXPECT_EQ(attention_mass_recall(q.data(), G, ctx.view(), 0, n, 0.125f, chunks, cfg.chunk_tokens), 1.0);
}

}  // namespace
}  // namespace hs
