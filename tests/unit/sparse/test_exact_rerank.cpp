// tests/unit/sparse/test_exact_rerank.cpp — the two-stage selection (sparse/exact_rerank.h):
// reranking a shortlist that holds every candidate is the oracle's selection; otherwise the
// kept chunks are the shortlist's most massive (exactly, one head) with sinks and window;
// select and select_batch agree and the reranked key rows are counted; bad combinations are
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "backend/cpu_sparse_kernels.h"
#include "core/fp16.h"
#include "sparse/exact_chunk_mass.h"
#include "sparse/oracle_selector.h"
#include "backend/cpu_sparse_attention.h"
#include "sparse/sketch_basis.h"
#include "sparse/sparse_runtime.h"
#include "sparse_test_util.h"

namespace hs {
namespace {

using test::PagedContext;
using test::randn;
using test::sparse_seed;

// Hot-spotted random keys (sparse_test_util.h); the runtime records each key's metadata.
void fill(PagedContext& ctx, SparseRuntime& rt, std::mt19937& rng) {
  test::fill_hot_keys(ctx, rng, 0.03, [&](int32_t t, const float* k, const float* v) {
    rt.on_key(ctx.seq.blocks, 0, 0, t, k, v);
  });
}

SparseRuntime::Geometry geometry(const KvCache& kv) {
  const KvGeometry& g = kv.geometry();
  return SparseRuntime::Geometry{1, 1, g.head_dim, g.page_tokens, kv.pool().n_blocks(),
                                 kv_token_bytes(g.dtype, g.head_dim), {true}};
}

// A host sketch runtime over the cache kv (one layer, one kv head, basis seed 5, scale 0.125).
Result<std::unique_ptr<SparseRuntime>> host_sketch_runtime(const SparseConfig& cfg, const KvCache& kv, int hd, int rank) {
  return SparseRuntime::create(SparseMode::kSketch, cfg, geometry(kv),
                               std::make_unique<SketchBasis>(random_sketch_basis(1, 1, hd, rank, 5)),
                               &cpu_sparse_kernels(), &kv, 0.125f);
}

SparseConfig small_config(int budget, int factor) {
  SparseConfig cfg;
  cfg.budget_tokens = budget;
  cfg.window_tokens = 64;
  cfg.min_context = 0;
  cfg.rerank_factor = factor;
  return cfg;
}

// The K-only log-mass kernel (cpu::chunk_log_mass) against a double reference on fresh random
// keys: every head size path (64 / 128 / 256 fixed, 48 generic), f32 and f16 pages, group
// sizes 1–8, chunk sizes 1–16, chunks in any order, a partial last chunk and chunks past the end.
TEST(SparseExactRerank, ChunkLogMassMatchesReference) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  for (int hd : {64, 128, 256, 48})
    for (KvDtype dt : {KvDtype::kF32, KvDtype::kF16}) {
      const int G = std::uniform_int_distribution<int>(1, 8)(rng);
      const int C = std::array<int, 4>{1, 4, 8, 16}[std::uniform_int_distribution<int>(0, 3)(rng)];
      const int32_t n = std::uniform_int_distribution<int32_t>(100, 700)(rng);
      KvGeometry kg{.n_layer = 1, .n_kv_heads = 2, .head_dim = hd, .page_tokens = 16, .dtype = dt};
      PagedContext ctx(kg, n, rng);
      std::vector<std::vector<float>> keys;  // [n][hd] as stored (f16-rounded for f16 pages)
      for (int32_t t = 0; t < n; ++t) {
        auto k = randn(rng, hd), v = randn(rng, hd);
        if (dt == KvDtype::kF16)
          for (float& x : k) x = fp16_to_fp32(fp32_to_fp16(x));
        ctx.cache.write(ctx.seq, 0, 1, t, k.data(), v.data());
        keys.push_back(k);
      }
      const auto q = randn(rng, G * hd);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const int32_t n_chunks = (n + C - 1) / C;
      std::vector<int32_t> ids;
      for (int i = 0; i < 40; ++i) ids.push_back(std::uniform_int_distribution<int32_t>(0, n_chunks + 2)(rng));
      ids.push_back(n_chunks - 1);  // the partial (or full) last chunk
      // Runs of consecutive ids (scored as one run while they stay in a page): across page
      // boundaries, and into the partial last chunk and past the end.
      for (int32_t c = 3; c < 3 + 3 * 16 / C && c < n_chunks; ++c) ids.push_back(c);
      for (int32_t c = std::max(0, n_chunks - 40 / C - 2); c < n_chunks + 2; ++c) ids.push_back(c);
      std::vector<float> got(ids.size() * G);
      const cpu::PagedKvView view{ctx.cache.layer_base(0), kg.page_elems(), ctx.seq.blocks.data(), 16, hd,
                                  dt == KvDtype::kF16};
      cpu::chunk_log_mass(q.data(), G, view, 1, ids.data(), static_cast<int>(ids.size()), C, n, scale, got.data());
      for (size_t i = 0; i < ids.size(); ++i)
        for (int g = 0; g < G; ++g) {
          const int32_t b = ids[i] * C, e = std::min(n, b + C);
          const float v = got[i * G + g];
          if (b >= e) {
            EXPECT_EQ(v, -INFINITY) << "chunk " << ids[i] << " past the end";
            continue;
          }
          double mx = -1e300, sum = 0;
          std::vector<double> sc;
          for (int32_t t = b; t < e; ++t) {
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[g * hd + d]) * keys[t][d];
            sc.push_back(dot * scale);
            mx = std::max(mx, sc.back());
          }
          for (double x : sc) sum += std::exp(x - mx);
          EXPECT_NEAR(v, mx + std::log(sum), 2e-4 * (1 + std::abs(mx)))
              << "hd " << hd << " G " << G << " C " << C << " chunk " << ids[i] << " head " << g;
        }
    }
}

TEST(SparseExactRerank, ShortlistOfEveryCandidateIsTheOracle) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, G = 4;
  const float scale = 0.25f;
  for (int iter = 0; iter < 4; ++iter) {
    const int32_t n = std::uniform_int_distribution<int32_t>(800, 1800)(rng);
    KvGeometry kg{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16,
                  .dtype = iter % 2 ? KvDtype::kF16 : KvDtype::kF32};
    PagedContext ctx(kg, n, rng);
    SparseConfig cfg = small_config(128, 16);  // shortlist 2048 tokens ≥ every candidate
    auto rt = SparseRuntime::create(SparseMode::kQuest, cfg, geometry(ctx.cache), nullptr, &cpu_sparse_kernels(), &ctx.cache, scale);
    ASSERT_TRUE(rt.is_ok()) << rt.status().to_string();
    fill(ctx, **rt, rng);
    const auto q = randn(rng, G * hd);
    std::vector<int32_t> got;
    SelectScratch scratch;
    (*rt)->select(ctx.seq.blocks, 0, 0, q.data(), G, n, got, scratch);

    SparseConfig plain = cfg;
    plain.rerank_factor = 0;
    auto oracle = OracleSelector::create(cpu_sparse_kernels(), ctx.cache, scale, plain);
    ASSERT_TRUE(oracle.is_ok());
    const SelectInput in{.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.seq.blocks, .n_tokens = n};
    std::vector<int32_t> want;
    (*oracle)->select(in, want);
    EXPECT_EQ(got, want) << "n " << n;
    EXPECT_NEAR(attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, got, cfg.chunk_tokens),
                attention_mass_recall(q.data(), G, ctx.view(), 0, n, scale, want, cfg.chunk_tokens), 1e-6);
  }
}

TEST(SparseExactRerank, KeepsTheShortlistsMostMassiveChunks) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, G = 1;
  const float scale = 0.3f;
  for (int iter = 0; iter < 4; ++iter) {
    const int32_t n = std::uniform_int_distribution<int32_t>(2000, 5000)(rng);
    const int budget = std::uniform_int_distribution<int>(2, 12)(rng) * 16;
    const int factor = std::uniform_int_distribution<int>(2, 4)(rng);
    KvGeometry kg{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16, .dtype = KvDtype::kF32};
    PagedContext ctx(kg, n, rng);
    const SparseConfig cfg = small_config(budget, factor);
    auto rt = SparseRuntime::create(SparseMode::kQuest, cfg, geometry(ctx.cache), nullptr, &cpu_sparse_kernels(), &ctx.cache, scale);
    ASSERT_TRUE(rt.is_ok()) << rt.status().to_string();
    fill(ctx, **rt, rng);
    const auto q = randn(rng, G * hd);
    const SelectInput in{.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.seq.blocks, .n_tokens = n};
    SCOPED_TRACE("n " + std::to_string(n) + " budget " + std::to_string(budget) + " factor " + std::to_string(factor));

    // The first stage alone: the shortlist of factor × budget.
    std::vector<int32_t> shortlist;
    (*rt)->selector().select(in, shortlist);
    std::vector<int32_t> got;
    SelectScratch scratch;
    (*rt)->select(ctx.seq.blocks, 0, 0, q.data(), G, n, got, scratch);

    const auto [first, last] = candidate_range(n, cfg);
    std::vector<int32_t> kept, dropped;
    const std::set<int32_t> got_set(got.begin(), got.end());
    ASSERT_EQ(got_set.size(), got.size());
    ASSERT_TRUE(std::is_sorted(got.begin(), got.end()));
    int32_t n_forced = 0;
    for (int32_t c : shortlist) {
      if (c < first || c >= last) {
        EXPECT_TRUE(got_set.count(c)) << "forced chunk " << c << " dropped";
        ++n_forced;
      } else {
        (got_set.count(c) ? kept : dropped).push_back(c);
      }
    }
    for (int32_t c : got) EXPECT_TRUE(std::binary_search(shortlist.begin(), shortlist.end(), c)) << c << " not shortlisted";
    EXPECT_EQ(static_cast<int32_t>(kept.size()), cfg.budget_chunks());
    EXPECT_EQ(static_cast<int32_t>(got.size()), n_forced + cfg.budget_chunks());
    ASSERT_FALSE(dropped.empty());
    // One head: the group mass ranks by exact mass, so every kept chunk outweighs every dropped one.
    std::vector<float> lk(kept.size()), ld(dropped.size());
    exact_chunk_log_masses(cpu_sparse_kernels(), ctx.cache, scale, cfg.chunk_tokens, in, kept, lk.data());
    exact_chunk_log_masses(cpu_sparse_kernels(), ctx.cache, scale, cfg.chunk_tokens, in, dropped, ld.data());
    EXPECT_GE(*std::min_element(lk.begin(), lk.end()), *std::max_element(ld.begin(), ld.end()));
  }
}

// select_batch gives what select gives, and the counters add the reranked key rows
// (shortlist + sinks + window, K only) to the scoring bytes.
TEST(SparseExactRerank, BatchedEqualsOneByOneAndCountsTheKeysRead) {
  const unsigned seed = sparse_seed();
  std::mt19937 rng(seed);
  const int hd = 64, G = 3;
  const int32_t n = std::uniform_int_distribution<int32_t>(3000, 6000)(rng);
  KvGeometry kg{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16, .dtype = KvDtype::kF16};
  PagedContext ctx(kg, n, rng);
  const SparseConfig cfg = small_config(256, 4);
  auto rt = SparseRuntime::create(SparseMode::kQuest, cfg, geometry(ctx.cache), nullptr, &cpu_sparse_kernels(), &ctx.cache, 0.2f);
  ASSERT_TRUE(rt.is_ok()) << rt.status().to_string();
  fill(ctx, **rt, rng);
  std::vector<std::vector<float>> qs;
  std::vector<SelectInput> ins;
  for (int i = 0; i < 5; ++i) qs.push_back(randn(rng, G * hd));
  for (int i = 0; i < 5; ++i)
    ins.push_back(SelectInput{.layer = 0, .kv_head = 0, .q = qs[i].data(), .n_q = G, .blocks = ctx.seq.blocks,
                              .n_tokens = n - 100 * i});
  ThreadPool pool(2);
  for (size_t n_batch : {size_t{1}, ins.size()}) {  // one selection: scoring split over the pool; five: one each
    std::vector<std::vector<int32_t>> batch(n_batch);
    BatchSelectScratch bs;
    (*rt)->reset_stats();
    (*rt)->select_batch(std::span<const SelectInput>(ins.data(), n_batch), batch, bs, &pool);
    const SparseStats st = (*rt)->stats();
    int64_t meta = 0, rows = 0;
    for (size_t i = 0; i < n_batch; ++i) {
      std::vector<int32_t> one;
      SelectScratch scratch;
      (*rt)->select(ctx.seq.blocks, 0, 0, qs[i].data(), G, ins[i].n_tokens, one, scratch);
      EXPECT_EQ(batch[i], one) << "selection " << i;
      std::vector<int32_t> shortlist;
      (*rt)->selector().select(ins[i], shortlist);
      for (int32_t c : shortlist) rows += std::min<int64_t>(16, ins[i].n_tokens - int64_t{c} * 16);
      const auto [first, last] = candidate_range(ins[i].n_tokens, (*rt)->selector().config());
      meta += int64_t{last - first} * 2 * hd * 4;  // Quest: min and max keys per chunk
    }
    EXPECT_EQ(st.score_bytes, meta + rows * kv_token_bytes(KvDtype::kF16, hd) / 2);
  }
}

// A device backend's selections (CUDA: SparseRuntime::count_external) count the K rows its
// rerank read as the host path does: half a token's K + V bytes per row, on top of the sketches.
TEST(SparseExactRerank, DeviceCountersCountTheRerankedRows) {
  std::mt19937 rng(3);
  KvGeometry kg{.n_layer = 1, .n_kv_heads = 1, .head_dim = 32, .page_tokens = 16, .dtype = KvDtype::kF16};
  PagedContext ctx(kg, 64, rng);
  const SparseConfig cfg = small_config(64, 4);
  auto rt = SparseRuntime::create(SparseMode::kSketch, cfg, geometry(ctx.cache),
                                  std::make_unique<SketchBasis>(random_sketch_basis(1, 1, 32, 8, 3)), nullptr,
                                  &ctx.cache, 0.2f);
  ASSERT_TRUE(rt.is_ok()) << rt.status().to_string();
  (*rt)->count_external(3, 1000, 200, 900, 16, 300);  // 3 selections; 900 sketch tokens, 300 K rows each
  (*rt)->count_external(2, 500, 150, 400, 16);         // no rerank
  const SparseStats st = (*rt)->stats();
  const int64_t k_row = kv_token_bytes(KvDtype::kF16, 32) / 2;
  EXPECT_EQ(st.score_bytes, 3 * (900 * 16 + 300 * k_row) + 2 * (400 * 16));
  EXPECT_EQ(st.sparse_heads, 5);
  EXPECT_EQ(st.keys_selected, 3 * 200 + 2 * 150);
  EXPECT_EQ(st.kv_bytes, (3 * 200 + 2 * 150) * kv_token_bytes(KvDtype::kF16, 32));
}

TEST(SparseExactRerank, RefusesWhatItCannotDo) {
  std::mt19937 rng(1);
  KvGeometry kg{.n_layer = 1, .n_kv_heads = 1, .head_dim = 32, .page_tokens = 16, .dtype = KvDtype::kF32};
  PagedContext ctx(kg, 64, rng);
  const auto g = geometry(ctx.cache);
  SparseConfig cfg = small_config(64, 4);
  EXPECT_FALSE(SparseRuntime::create(SparseMode::kOracle, cfg, g, nullptr, &cpu_sparse_kernels(), &ctx.cache, 0.2f).is_ok());
  EXPECT_FALSE(SparseRuntime::create(SparseMode::kQuest, cfg, g, nullptr, &cpu_sparse_kernels(), nullptr, 0.2f).is_ok());  // no KV
  SparseConfig one = cfg;
  one.rerank_factor = 1;
  EXPECT_FALSE(SparseRuntime::create(SparseMode::kQuest, one, g, nullptr, &cpu_sparse_kernels(), &ctx.cache, 0.2f).is_ok());
  SparseConfig tail = cfg;
  tail.tail_estimate = true;
  tail.chunk_mass_scale = 0.2f;
  EXPECT_FALSE(SparseRuntime::create(SparseMode::kQuest, tail, g, nullptr, &cpu_sparse_kernels(), &ctx.cache, 0.2f).is_ok());
  KvGeometry k8 = kg;
  k8.dtype = KvDtype::kInt8;
  KvCache int8_cache(k8, 8);
  EXPECT_FALSE(SparseRuntime::create(SparseMode::kQuest, cfg, geometry(int8_cache), nullptr, &cpu_sparse_kernels(), &int8_cache, 0.2f).is_ok());
  EXPECT_TRUE(SparseRuntime::create(SparseMode::kQuest, cfg, g, nullptr, &cpu_sparse_kernels(), &ctx.cache, 0.2f).is_ok());
  // Without host kernels (a backend that selects on its own device) only the sketch mode's
  // configuration can be kept, its rerank included (the device reranks: CUDA); Quest and the
  // oracle need the host path.
  EXPECT_FALSE(SparseRuntime::create(SparseMode::kQuest, cfg, g, nullptr, nullptr, &ctx.cache, 0.2f).is_ok());
  SparseConfig plain = cfg;
  plain.rerank_factor = 0;
  EXPECT_FALSE(SparseRuntime::create(SparseMode::kOracle, plain, g, nullptr, nullptr, &ctx.cache, 0.2f).is_ok());
  auto dev = SparseRuntime::create(SparseMode::kSketch, plain, g,
                                   std::make_unique<SketchBasis>(random_sketch_basis(1, 1, 32, 8, 3)), nullptr,
                                   &ctx.cache, 0.2f);
  ASSERT_TRUE(dev.is_ok()) << dev.status().to_string();
  EXPECT_FALSE((*dev)->host_selection());
  auto dev_rr = SparseRuntime::create(SparseMode::kSketch, cfg, g,
                                      std::make_unique<SketchBasis>(random_sketch_basis(1, 1, 32, 8, 3)), nullptr,
                                      &ctx.cache, 0.2f);
  ASSERT_TRUE(dev_rr.is_ok()) << dev_rr.status().to_string();
  EXPECT_FALSE((*dev_rr)->host_selection());
  EXPECT_EQ((*dev_rr)->config().rerank_factor, cfg.rerank_factor);
  EXPECT_GE(cfg.rerank_factor, 2);
}

// --sparse-rerank auto: on (factor 8) exactly when R × budget key rows per full (layer, kv head)
// cost at most 1/4 of the step's weight bytes, and only for plain KV.
TEST(SparseExactRerank, AutoFactorFollowsTheByteRule) {
  const int64_t gemma_weights = 253113024, smollm_weights = 98362432, qwen05_weights = 491400064;
  EXPECT_EQ(kAutoRerankFactor, 8);
  // Gemma 3 270M: 3 full layers × 1 kv head, K row 512 B (f16, head_dim 256).
  EXPECT_EQ(auto_rerank_factor(gemma_weights, 3, 512, 2048, true), kAutoRerankFactor);
  EXPECT_EQ(auto_rerank_factor(gemma_weights, 3, 512, 2048, false), 0);  // int8 / int4 KV
  // Qwen2.5-Coder-0.5B: 24 × 2, K row 128 B.
  EXPECT_EQ(auto_rerank_factor(qwen05_weights, 48, 128, 2048, true), kAutoRerankFactor);
  // SmolLM2-135M: 30 × 3, K row 128 B.
  EXPECT_EQ(auto_rerank_factor(smollm_weights, 90, 128, 2048, true), 0);
  // The boundary: 8 × budget × heads × row × 4 against the weights.
  EXPECT_EQ(auto_rerank_factor(8 * 1000 * 2 * 100 * 4, 2, 100, 1000, true), kAutoRerankFactor);
  EXPECT_EQ(auto_rerank_factor(8 * 1000 * 2 * 100 * 4 - 1, 2, 100, 1000, true), 0);
  EXPECT_EQ(auto_rerank_factor(0, 2, 100, 1000, true), 0);
}

// The host sketch selector's emulation of the GPU's hierarchical rule: a shortlist covering
// every candidate selects as the flat rule; a short one selects the flat rule's top-k among the
// chunks whose bound (recomputed here from the stored sketches) ranks in the best N.
TEST(SparsePageShortlist, HostEmulationKeepsTheBestBounds) {
  std::mt19937 rng(sparse_seed());
  const int hd = 64, G = 4, R = 16;
  KvGeometry kg{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16, .dtype = KvDtype::kF16};
  const int32_t n = 3000;
  PagedContext ctx(kg, n, rng);
  SparseConfig flat = small_config(256, 0);
  auto make = [&](int32_t shortlist) -> std::unique_ptr<SparseRuntime> {
    SparseConfig cfg = flat;
    cfg.page_shortlist = shortlist;
    auto rt = host_sketch_runtime(cfg, ctx.cache, hd, R);
    EXPECT_TRUE(rt.is_ok()) << rt.status().to_string();
    return rt.is_ok() ? std::move(*rt) : nullptr;
  };
  auto rt_flat = make(0), rt_all = make(4096), rt_short = make(24);
  ASSERT_TRUE(rt_flat && rt_all && rt_short);
  test::fill_hot_keys(ctx, rng, 0.03, [&](int32_t t, const float* k, const float* v) {
    for (SparseRuntime* rt : {rt_flat.get(), rt_all.get(), rt_short.get()}) rt->on_key(ctx.seq.blocks, 0, 0, t, k, v);
  });
  const auto q = randn(rng, G * hd);
  const SelectInput in{.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.seq.blocks, .n_tokens = n};
  std::vector<int32_t> want, all, got;
  rt_flat->selector().select(in, want);
  rt_all->selector().select(in, all);
  rt_short->selector().select(in, got);
  EXPECT_EQ(all, want);
  ASSERT_EQ(got.size(), want.size());
  // The bounds, from the stored sketches.
  const ChunkSelector& sel = rt_short->selector();
  std::vector<float> prep(static_cast<size_t>(sel.prep_floats(G)));
  sel.prepare(in, prep.data());
  const auto [first, last] = candidate_range(n, flat);
  std::vector<float> bound;
  std::vector<float> sk(R);
  for (int32_t c = first; c < last; ++c) {
    float best = -INFINITY;
    for (int g = 0; g < G; ++g) {
      float ub = prep[static_cast<size_t>(G * R + g)];
      for (int j = 0; j < R; ++j) {
        float mx = -INFINITY, mn = INFINITY;
        for (int32_t t = c * 16; t < std::min(n, (c + 1) * 16); ++t) {
          rt_short->sketches()->read(ctx.seq.blocks, 0, 0, t, sk.data());
          mx = std::max(mx, sk[j]);
          mn = std::min(mn, sk[j]);
        }
        const float qv = prep[static_cast<size_t>(g * R + j)];
        ub += std::max(qv * mx, qv * mn);
      }
      best = std::max(best, ub);
    }
    bound.push_back(best);
  }
  std::vector<float> sorted = bound;
  std::sort(sorted.rbegin(), sorted.rend());
  const float kth = sorted[23];
  int scored = 0;
  for (int32_t c : got)
    if (c >= first && c < last) {
      ++scored;
      EXPECT_GE(bound[static_cast<size_t>(c - first)], kth - 1e-4f * std::abs(kth)) << "chunk " << c << " outside the shortlist";
    }
  EXPECT_EQ(scored, flat.budget_chunks());
}

// The host emulation of CUDA's chain (page bounds, then sketch scores, then the exact rerank):
// page bounds covering every candidate select as the flat rerank; a short page shortlist
// (N >= R x budget chunks) reranks only chunks the bounds kept; below R x budget it is refused.
TEST(SparsePageShortlist, ChainsIntoTheRerankOnTheHost) {
  std::mt19937 rng(sparse_seed());
  const int hd = 64, G = 4, R = 16;
  KvGeometry kg{.n_layer = 1, .n_kv_heads = 1, .head_dim = hd, .page_tokens = 16, .dtype = KvDtype::kF16};
  const int32_t n = 3000;
  PagedContext ctx(kg, n, rng);
  const SparseConfig rr = small_config(256, 4);  // 16 budget chunks, a shortlist of 64
  auto make = [&](int32_t pages) -> std::unique_ptr<SparseRuntime> {
    SparseConfig cfg = rr;
    cfg.page_shortlist = pages;
    auto rt = host_sketch_runtime(cfg, ctx.cache, hd, R);
    EXPECT_TRUE(rt.is_ok()) << rt.status().to_string();
    return rt.is_ok() ? std::move(*rt) : nullptr;
  };
  auto flat = make(0), all = make(4096), chain = make(80);
  ASSERT_TRUE(flat && all && chain);
  test::fill_hot_keys(ctx, rng, 0.03, [&](int32_t t, const float* k, const float* v) {
    for (SparseRuntime* rt : {flat.get(), all.get(), chain.get()}) rt->on_key(ctx.seq.blocks, 0, 0, t, k, v);
  });
  const auto q = randn(rng, G * hd);
  SelectScratch scratch;
  std::vector<int32_t> want, got_all, got, shortlist;
  flat->select(ctx.seq.blocks, 0, 0, q.data(), G, n, want, scratch);
  all->select(ctx.seq.blocks, 0, 0, q.data(), G, n, got_all, scratch);
  EXPECT_EQ(got_all, want);
  chain->select(ctx.seq.blocks, 0, 0, q.data(), G, n, got, scratch);
  const SelectInput in{.layer = 0, .kv_head = 0, .q = q.data(), .n_q = G, .blocks = ctx.seq.blocks, .n_tokens = n};
  chain->selector().select(in, shortlist);  // the chain's first two stages: bounds, then sketch scores
  const auto [first, last] = candidate_range(n, rr);
  const std::set<int32_t> listed(shortlist.begin(), shortlist.end());
  int scored = 0;
  for (int32_t c : got)
    if (c >= first && c < last) {
      ++scored;
      EXPECT_TRUE(listed.count(c)) << "chunk " << c << " reranked from outside the bounds' shortlist";
    }
  EXPECT_EQ(scored, rr.budget_chunks());
  EXPECT_EQ(static_cast<int>(shortlist.size()) - (static_cast<int>(got.size()) - scored), 64) << "R x budget listed";
  // Below R x budget chunks: refused, naming the rerank.
  SparseConfig low = rr;
  low.page_shortlist = 63;
  auto bad = host_sketch_runtime(low, ctx.cache, hd, R);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("the rerank's 4"), std::string::npos) << bad.status().message();
}

// Hierarchical page scoring (--sparse-page-shortlist) takes the sketch selector: Quest refuses it
// with a message naming it, and a shortlist below the budget is refused.
TEST(SparsePageShortlist, RefusedOffTheSketchPath) {
  std::mt19937 rng(sparse_seed());
  KvGeometry kg{.n_layer = 1, .n_kv_heads = 1, .head_dim = 64, .page_tokens = 16, .dtype = KvDtype::kF16};
  PagedContext ctx(kg, 100, rng);
  SparseConfig cfg = small_config(128, 0);
  cfg.page_shortlist = 64;
  auto rt = SparseRuntime::create(SparseMode::kQuest, cfg, geometry(ctx.cache), nullptr, &cpu_sparse_kernels(), &ctx.cache, 0.25f);
  ASSERT_FALSE(rt.is_ok());
  EXPECT_NE(rt.status().message().find("--sparse-page-shortlist"), std::string::npos) << rt.status().message();
  cfg.page_shortlist = 4;  // below the budget's 8 chunks, and the device path (no kernels)
  auto dev = SparseRuntime::create(SparseMode::kSketch, cfg, geometry(ctx.cache),
                                   std::make_unique<SketchBasis>(random_sketch_basis(1, 1, 64, 16, 1)), nullptr,
                                   &ctx.cache, 0.25f);
  ASSERT_FALSE(dev.is_ok());
  EXPECT_NE(dev.status().message().find("below the budget"), std::string::npos) << dev.status().message();
}

}  // namespace
}  // namespace hs
