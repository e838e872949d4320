// tests/unit/sparse/test_tail_estimate.cpp — the estimated tail: exact where its model is
// exact (exact scores, and values constant within each chunk), so selection + tail equals
// dense attention; chunk mean values; nothing added when every chunk is selected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu_sparse_kernels.h"
#include "sparse/chunk_value_means.h"
#include "sparse/selector.h"
#include "sparse/sketch_store.h"
#include "backend/cpu_sparse_attention.h"
#include "sparse/tail_estimate.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::PagedContext;
using test::randn;
using test::sparse_seed;

TEST(TailEstimate, ChunkMeansAreRunningMeans) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 8, P = 16, C = 4, n = 50;
  std::vector<int32_t> blocks = {3, 0, 2, 1};
  ChunkValueMeans means({false, true}, 2, hd, P, C, 4);
  std::vector<std::vector<float>> vs;
  for (int t = 0; t < n; ++t) {
    vs.push_back(randn(rng, hd));
    means.write(blocks, 1, 1, t, vs.back().data());
    means.write(blocks, 0, 1, t, vs.back().data());  // not a full layer: ignored
  }
  for (int c = 0; c < (n + C - 1) / C; ++c)
    for (int d = 0; d < hd; ++d) {
      double sum = 0;
      int cnt = 0;
      for (int t = c * C; t < std::min(n, (c + 1) * C); ++t, ++cnt) sum += vs[t][d];
      ASSERT_NEAR(means.mean(blocks, 1, 1, c)[d], sum / cnt, 1e-5) << "chunk " << c;
    }
}

// Selection + estimated tail vs dense attention on one kv head of n tokens.
struct Case {
  int C;
  bool constant_values_per_chunk;
};

void run_case(const Case& cs, std::mt19937& rng, double tol) {
  const int hd = 32, G = 3, P = 16;
  const int32_t n = 2000 + static_cast<int32_t>(rng() % 1000);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  KvGeometry g{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = P, .dtype = KvDtype::kF32};
  PagedContext ctx(g, n, rng);
  // Full-rank identity basis with f32 sketches: the sketch score is q·k itself.
  const SketchBasis basis = SketchBasis::identity(1, 1, hd, hd);
  SketchStore sketches(cpu_sparse_kernels(), basis, P, ctx.cache.pool().n_blocks(), SketchElem::kF32);
  ChunkValueMeans means({true}, 1, hd, P, cs.C, ctx.cache.pool().n_blocks());
  std::vector<float> v;
  for (int32_t t = 0; t < n; ++t) {
    const auto k = randn(rng, hd, 2.0f);
    if (!cs.constant_values_per_chunk || t % cs.C == 0) v = randn(rng, hd);
    ctx.cache.write(ctx.seq, 0, 0, t, k.data(), v.data());
    sketches.write(ctx.seq.blocks, 0, 0, t, k.data());
    means.write(ctx.seq.blocks, 0, 0, t, v.data());
  }
  SparseConfig cfg;
  cfg.chunk_tokens = cs.C;
  cfg.budget_tokens = 128;
  cfg.sink_tokens = 4;
  cfg.window_tokens = 32;
  cfg.chunk_mass_scale = scale;
  cfg.tail_estimate = true;
  auto sel = SketchTopKSelector::create(sketches, cfg);
  ASSERT_TRUE(sel.is_ok());
  const auto q = randn(rng, G * hd);
  std::vector<SelectInput> ins = {
      {.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.seq.blocks, .n_tokens = n}};
  std::vector<std::vector<int32_t>> outs(1);
  BatchSelectScratch scratch;
  (*sel)->select_batch(ins, outs, scratch, nullptr);
  ASSERT_GE(scratch.offset[0], 0);
  // Exact partials over the selected ranges, then the tail, merged.
  std::vector<KeyRange> ranges;
  chunk_ranges(outs[0], cs.C, n, 0, ranges);
  const int part_floats = G * (2 + hd);
  std::vector<float> buf((ranges.size() + 1) * part_floats);
  std::vector<cpu::AttnPartial> parts;
  for (size_t i = 0; i <= ranges.size(); ++i) {
    float* b = buf.data() + i * part_floats;
    parts.push_back({b, b + G, b + 2 * G});
  }
  for (size_t i = 0; i < ranges.size(); ++i)
    cpu::attention_partial(q.data(), G, ctx.view(), 0, ranges[i].begin, ranges[i].end, scale, parts[i]);
  const auto [first, last] = candidate_range(n, cfg);
  estimate_tail(scratch.scores.data() + scratch.offset[0], G, first, last, outs[0], means, ctx.seq.blocks, 0, 0,
                parts.back());
  std::vector<float> with_tail(G * hd), dropped(G * hd), dense(G * hd);
  cpu::attention_merge(parts.data(), static_cast<int>(parts.size()), G, hd, with_tail.data());
  cpu::attention_merge(parts.data(), static_cast<int>(ranges.size()), G, hd, dropped.data());
  cpu::attention_paged(q.data(), G, ctx.view(), 0, 0, n, scale, dense.data());
  double err_tail = 0, err_drop = 0;
  for (int i = 0; i < G * hd; ++i) {
    err_tail = std::max(err_tail, static_cast<double>(std::fabs(with_tail[i] - dense[i])));
    err_drop = std::max(err_drop, static_cast<double>(std::fabs(dropped[i] - dense[i])));
  }
  EXPECT_LT(err_tail, tol) << "C " << cs.C << " n " << n << " (dropping the tail: " << err_drop << ")";
  EXPECT_GT(err_drop, 10 * tol) << "the case must leave real mass out";
}

TEST(TailEstimate, ExactScoresAndOneTokenChunksGiveDense) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 3; ++trial) run_case({1, false}, rng, 2e-4);
}

TEST(TailEstimate, ExactScoresAndChunkConstantValuesGiveDense) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  for (int C : {4, 16}) run_case({C, true}, rng, 2e-4);
}

TEST(TailEstimate, NothingMissingGivesAnEmptyPartial) {
  const int hd = 4, G = 2, P = 16, C = 4;
  std::vector<int32_t> blocks = {0, 1};
  ChunkValueMeans means({true}, 1, hd, P, C, 2);
  std::vector<float> log_mass = {0.1f, 0.2f, 0.3f, 0.4f};  // [2 candidates][G]
  std::vector<float> buf(G * (2 + hd), 7.0f);
  cpu::AttnPartial part{buf.data(), buf.data() + G, buf.data() + 2 * G};
  const std::vector<int32_t> selected = {0, 1, 2, 3};
  estimate_tail(log_mass.data(), G, 1, 3, selected, means, blocks, 0, 0, part);
  for (int g = 0; g < G; ++g) {
    EXPECT_EQ(part.max[g], -INFINITY);
    EXPECT_EQ(part.sum[g], 0.0f);
  }
  for (int i = 0; i < G * hd; ++i) EXPECT_EQ(part.acc[i], 0.0f);
}

}  // namespace
}  // namespace hs
