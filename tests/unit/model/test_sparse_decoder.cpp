// tests/unit/model/test_sparse_decoder.cpp — sparse attention inside the real decoder
// (SmolLM2): with a budget covering the context every decode logit equals dense bit for bit;
// with a small budget only the selected keys are read and the sketch/Quest metadata of every
// stored key is kept. The same through the device tier (sparse/hot_chunks.h): bitwise dense
// when the budget covers the context, equal to the no-tier sparse path with a small budget
// and few hot slots, fetch counters that add up, and every slot and lease back after the
// sequences end, in the engine too. (Real model: excluded under ASan with the other model
// tests.)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "model/decoder.h"
#include "sparse_model_util.h"
#include "sparse/hot_chunks.h"
#include "sparse/sparse_runtime.h"

namespace hs {
namespace {

std::unique_ptr<Decoder> load() {
  const std::string path = std::string(HS_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";
  if (!std::filesystem::exists(path)) return nullptr;
  auto d = Decoder::load(path);
  return d.is_ok() ? std::move(*d) : nullptr;
}

using test::make_sparse_runtime;
// The runtime over SmolLM2's 30 layers (make_sparse_runtime's defaults: random rank-16 sketches).
auto make_runtime = [](const Decoder& dec, const KvCache& kv, SparseMode mode, int budget, int min_context = 0,
                       bool group_mass = false, bool tail = false, int chunk_tokens = 16, int rerank = 0) {
  return make_sparse_runtime(dec, kv, mode, budget, min_context, group_mass, tail, chunk_tokens, rerank);
};

// Prefill `prompt`, then `steps` greedy decode steps; returns every decode logits row.
// With `forced`, step s feeds forced[s] instead of the argmax; `fed` gets the tokens fed.
std::vector<std::vector<float>> run(Decoder& dec, KvCache& kv, ThreadPool& pool, const std::vector<int32_t>& prompt,
                                    int steps, const std::vector<int32_t>* forced = nullptr,
                                    std::vector<int32_t>* fed = nullptr) {
  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  std::vector<float> logits;
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
  EXPECT_TRUE(dec.forward(b, seqs, kv, pool, logits).is_ok());
  std::vector<std::vector<float>> rows;
  const int V = dec.config().n_vocab;
  for (int s = 0; s < steps; ++s) {
    const int32_t next = forced ? (*forced)[s]
                                : static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
    if (fed) fed->push_back(next);
    Batch d;
    d.add(next, seq.n_tokens, 0, true);
    EXPECT_TRUE(dec.forward(d, seqs, kv, pool, logits).is_ok());
    rows.emplace_back(logits.begin(), logits.begin() + V);
  }
  kv.release(seq);
  return rows;
}

std::vector<int32_t> random_prompt(int n, int vocab) {
  std::random_device rd;
  std::mt19937 rng(rd());
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng);
  return p;
}

TEST(SparseDecoder, BudgetCoveringContextEqualsDenseBitwise) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 128);
  ThreadPool pool;
  const auto prompt = random_prompt(700, c.n_vocab);
  const auto dense = run(*dec, kv, pool, prompt, 6);
  for (SparseMode mode : {SparseMode::kSketch, SparseMode::kQuest}) {
    auto rt = make_runtime(*dec, kv, mode, 4096);
    dec->set_sparse(rt.get());
    const auto sparse = run(*dec, kv, pool, prompt, 6);
    dec->set_sparse(nullptr);
    ASSERT_EQ(sparse.size(), dense.size());
    for (size_t s = 0; s < dense.size(); ++s) EXPECT_EQ(sparse[s], dense[s]) << sparse_mode_name(mode) << " step " << s;
    const SparseStats st = rt->stats();
    EXPECT_EQ(st.sparse_heads, 6 * c.n_layer * c.n_head_kv);  // every decode (layer, head) went through select
    EXPECT_EQ(st.keys_selected, st.keys_total);
  }
}

TEST(SparseDecoder, SmallBudgetReadsOnlyTheSelectedKeys) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 128);
  ThreadPool pool;
  const auto prompt = random_prompt(1200, c.n_vocab);
  for (SparseMode mode : {SparseMode::kSketch, SparseMode::kQuest}) {
    auto rt = make_runtime(*dec, kv, mode, 128);
    dec->set_sparse(rt.get());
    const auto rows = run(*dec, kv, pool, prompt, 4);
    dec->set_sparse(nullptr);
    const SparseStats st = rt->stats();
    // 128 budget + 16 sinks + 32 window (+ one partial chunk) of ~1200 keys.
    EXPECT_LE(st.keys_selected, st.sparse_heads * (128 + 16 + 32 + 32));
    EXPECT_GT(st.keys_total, 6 * st.keys_selected);
    for (const auto& r : rows)
      for (float x : r) ASSERT_TRUE(std::isfinite(x));
  }
}

// The group-mass sketch score, the oracle selector and the estimated tail in the decoder: a
// budget covering the context is still dense bit for bit; with a small budget of one-token
// chunks the tail from the oracle's exact masses is exact (the mean value of a one-token
// chunk is its value), so sparse + tail lands on dense while dropping the tail does not (same
// tokens fed). (With 16-token chunks the chunk-mean tail is measured *worse* than dropping on
// SmolLM2: docs/sparse-attention.md.)
TEST(SparseDecoder, GroupMassOracleAndEstimatedTail) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, KvDtype::kF16}, 128);
  ThreadPool pool;
  const auto prompt = random_prompt(1200, c.n_vocab);
  std::vector<int32_t> fed;
  const auto dense = run(*dec, kv, pool, prompt, 4, nullptr, &fed);
  for (SparseMode mode : {SparseMode::kSketch, SparseMode::kOracle}) {
    auto rt = make_runtime(*dec, kv, mode, 4096, 0, true, true);
    dec->set_sparse(rt.get());
    const auto full = run(*dec, kv, pool, prompt, 4, &fed);
    dec->set_sparse(nullptr);
    for (size_t s = 0; s < dense.size(); ++s) EXPECT_EQ(full[s], dense[s]) << sparse_mode_name(mode) << " step " << s;
  }
  auto l2 = [](const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0;
    for (size_t i = 0; i < a.size(); ++i) e += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    return std::sqrt(e);
  };
  std::vector<std::vector<float>> rows[2];
  for (int tail = 0; tail < 2; ++tail) {
    auto rt = make_runtime(*dec, kv, SparseMode::kOracle, 128, 0, true, tail == 1, /*chunk_tokens=*/1);
    dec->set_sparse(rt.get());
    rows[tail] = run(*dec, kv, pool, prompt, 4, &fed);
    dec->set_sparse(nullptr);
    EXPECT_LT(rt->stats().keys_selected * 4, rt->stats().keys_total);
  }
  for (size_t s = 0; s < dense.size(); ++s) {
    const double drop = l2(rows[0][s], dense[s]), est = l2(rows[1][s], dense[s]);
    EXPECT_LT(est, 0.02 * drop) << "step " << s;
    for (float x : rows[1][s]) ASSERT_TRUE(std::isfinite(x));
  }
  // The sketch selector with the group mass and the tail runs the same path with estimates.
  auto rt = make_runtime(*dec, kv, SparseMode::kSketch, 128, 0, true, true);
  dec->set_sparse(rt.get());
  for (const auto& r : run(*dec, kv, pool, prompt, 4, &fed))
    for (float x : r) ASSERT_TRUE(std::isfinite(x));
  dec->set_sparse(nullptr);
}

// The two-stage selection (--sparse-rerank) in the decoder: dense bit for bit when the budget
// covers the context; the oracle's logits bit for bit when the shortlist holds every candidate
// (both then pick the top exact group mass); a real shortlist keeps the budget.
TEST(SparseDecoder, ExactRerank) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, KvDtype::kF16}, 128);
  ThreadPool pool;
  const auto prompt = random_prompt(1200, c.n_vocab);
  std::vector<int32_t> fed;
  const auto dense = run(*dec, kv, pool, prompt, 4, nullptr, &fed);
  auto full_rt = make_runtime(*dec, kv, SparseMode::kSketch, 4096, 0, false, false, 16, 4);
  dec->set_sparse(full_rt.get());
  const auto full = run(*dec, kv, pool, prompt, 4, &fed);
  for (size_t s = 0; s < dense.size(); ++s) EXPECT_EQ(full[s], dense[s]) << "step " << s;

  auto oracle_rt = make_runtime(*dec, kv, SparseMode::kOracle, 128, 0, true);
  dec->set_sparse(oracle_rt.get());
  const auto oracle = run(*dec, kv, pool, prompt, 4, &fed);
  for (SparseMode mode : {SparseMode::kSketch, SparseMode::kQuest}) {
    auto rt = make_runtime(*dec, kv, mode, 128, 0, false, false, 16, /*rerank=*/16);  // shortlist 2048 ≥ 1200
    dec->set_sparse(rt.get());
    const auto got = run(*dec, kv, pool, prompt, 4, &fed);
    for (size_t s = 0; s < dense.size(); ++s) EXPECT_EQ(got[s], oracle[s]) << sparse_mode_name(mode) << " step " << s;
    EXPECT_EQ(rt->stats().keys_selected, oracle_rt->stats().keys_selected);
  }
  auto rt = make_runtime(*dec, kv, SparseMode::kSketch, 128, 0, false, false, 16, /*rerank=*/3);
  dec->set_sparse(rt.get());
  for (const auto& r : run(*dec, kv, pool, prompt, 4, &fed))
    for (float x : r) ASSERT_TRUE(std::isfinite(x));
  dec->set_sparse(nullptr);
  const SparseStats st = rt->stats();
  EXPECT_LE(st.keys_selected, st.sparse_heads * (128 + 16 + 32 + 32));
  EXPECT_GT(st.score_bytes, st.sparse_heads * 3 * 128 * c.head_dim * 2);  // the shortlist's K rows, f16
}

auto make_tier = [](const Decoder& dec, KvCache& kv, int64_t slots, int32_t resident_seqs = 0) {
  return test::make_device_tier(dec, kv, slots, resident_seqs);
};

TEST(SparseDecoder, DeviceTierBudgetCoveringContextEqualsDenseBitwise) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 128);
  ThreadPool pool;
  const auto prompt = random_prompt(700, c.n_vocab);
  const auto dense = run(*dec, kv, pool, prompt, 6);
  auto hot = make_tier(*dec, kv, 64);  // every chunk of the ~700-token context fits
  dec->set_hot_chunks(hot.get());
  for (SparseMode mode : {SparseMode::kSketch, SparseMode::kQuest}) {
    auto rt = make_runtime(*dec, kv, mode, 4096);
    dec->set_sparse(rt.get());
    const auto sparse = run(*dec, kv, pool, prompt, 6);
    dec->set_sparse(nullptr);
    ASSERT_EQ(sparse.size(), dense.size());
    for (size_t s = 0; s < dense.size(); ++s) EXPECT_EQ(sparse[s], dense[s]) << sparse_mode_name(mode) << " step " << s;
    const SparseStats st = rt->stats();
    EXPECT_EQ(st.keys_selected, st.keys_total);
    // Keys 701..706, sink chunk 0, window from chunk (n - 32) / 16: chunks 1..40 go through
    // the tier (misses at the first step, hits after), and chunk 41 too from n = 704 on
    // (one miss, then two hits).
    const int64_t sets = static_cast<int64_t>(c.n_layer) * c.n_head_kv;
    EXPECT_EQ(st.fetch_misses, sets * 41);
    EXPECT_EQ(st.fetch_hits, sets * (3 * 40 + 2 * 41));
    EXPECT_EQ(st.fetch_bytes, st.fetch_misses * hot->piece_bytes());
    EXPECT_EQ(st.fetch_refused, 0);
    EXPECT_EQ(st.fetch_steps, 6);
    EXPECT_EQ(hot->slots_used(), 0);  // run() released the sequence: lease ended, slots freed
    EXPECT_EQ(kv.leases().n_live(), 0);
  }
  dec->set_hot_chunks(nullptr);
}

TEST(SparseDecoder, DeviceTierSmallBudgetEqualsNoTierSparseAndCountsEveryFetchedChunk) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 128);
  ThreadPool pool;
  const auto prompt = random_prompt(800, c.n_vocab);
  constexpr int kSteps = 5, kBudget = 128;
  for (SparseMode mode : {SparseMode::kSketch, SparseMode::kQuest}) {
    auto rt = make_runtime(*dec, kv, mode, kBudget);
    dec->set_sparse(rt.get());
    const auto plain = run(*dec, kv, pool, prompt, kSteps);
    // 10 slots per (layer, head) for 8 top chunks per step: selections that move evict.
    auto hot = make_tier(*dec, kv, 10);
    dec->set_hot_chunks(hot.get());
    rt->reset_stats();
    const auto tiered = run(*dec, kv, pool, prompt, kSteps);
    dec->set_hot_chunks(nullptr);
    dec->set_sparse(nullptr);
    ASSERT_EQ(tiered.size(), plain.size());
    float worst = 0;  // relative to the row's largest logit
    for (size_t s = 0; s < plain.size(); ++s) {
      float scale = 0, diff = 0;
      for (size_t i = 0; i < plain[s].size(); ++i) {
        scale = std::max(scale, std::abs(plain[s][i]));
        diff = std::max(diff, std::abs(tiered[s][i] - plain[s][i]));
      }
      EXPECT_LE(diff, 1e-5f * scale) << sparse_mode_name(mode) << " step " << s;
      worst = std::max(worst, diff / scale);
    }
    // With C = P the pieces kernel does the paged kernel's float math: expect 0 here.
    std::printf("[   tier   ] %s: max relative logit difference vs no tier %g\n", sparse_mode_name(mode), worst);
    const SparseStats st = rt->stats();
    // ~800 keys, 16 sinks, 32 window: the budget's 8 chunks are the fetched ones.
    const int64_t fetched = static_cast<int64_t>(kSteps) * c.n_layer * c.n_head_kv * (kBudget / 16);
    EXPECT_EQ(st.fetch_hits + st.fetch_misses, fetched);
    EXPECT_EQ(st.fetch_refused, 0);
    EXPECT_EQ(st.fetch_bytes, st.fetch_misses * hot->piece_bytes());
    EXPECT_GE(st.fetch_misses, c.n_layer * c.n_head_kv * (kBudget / 16));  // the first step is cold
    EXPECT_LE(st.fetch_evictions, st.fetch_misses);
    EXPECT_EQ(hot->total().misses, st.fetch_misses);
    EXPECT_EQ(hot->slots_used(), 0);
    EXPECT_EQ(kv.leases().n_live(), 0);
  }
}

// The host tier stored as bf16 / int8 / int4 (--kv-cache-dtype): dense attention reads the
// pages as pieces and stays close to f16; sparse with a budget covering the context equals it
// bit for bit, and so does the device tier with a small budget against no tier.
TEST(SparseDecoder, QuantizedKvCacheDenseSparseAndTier) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  ThreadPool pool;
  const auto prompt = random_prompt(600, c.n_vocab);
  constexpr int kSteps = 4;
  KvCache ref_kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, KvDtype::kF16}, 128);
  std::vector<int32_t> tokens;  // the f16 run's greedy tokens, fed to every dtype (no divergence)
  const auto ref = run(*dec, ref_kv, pool, prompt, kSteps, nullptr, &tokens);
  // Bounds on the largest logit change relative to the row's largest |logit| over 4 steps
  // (measured: see the printed values; int4 keeps 4 bits per element).
  const std::pair<KvDtype, float> cases[] = {{KvDtype::kBF16, 0.02f}, {KvDtype::kInt8, 0.05f}, {KvDtype::kInt4, 0.5f}};
  for (const auto& [dt, bound] : cases) {
    SCOPED_TRACE(kv_dtype_name(dt));
    KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, dt}, 128);
    const auto dense = run(*dec, kv, pool, prompt, kSteps, &tokens);
    ASSERT_EQ(dense.size(), ref.size());
    float worst = 0;
    for (size_t s = 0; s < ref.size(); ++s) {
      float scale = 0, diff = 0;
      for (size_t i = 0; i < ref[s].size(); ++i) {
        scale = std::max(scale, std::abs(ref[s][i]));
        diff = std::max(diff, std::abs(dense[s][i] - ref[s][i]));
      }
      worst = std::max(worst, diff / scale);
    }
    std::printf("[  kv dtype ] %s: max relative logit difference vs f16 %g\n", kv_dtype_name(dt), worst);
    EXPECT_GT(worst, 0.0f);  // the rows really were quantized
    EXPECT_LT(worst, bound);

    auto rt = make_runtime(*dec, kv, SparseMode::kSketch, 4096);
    dec->set_sparse(rt.get());
    const auto full = run(*dec, kv, pool, prompt, kSteps, &tokens);
    for (size_t s = 0; s < dense.size(); ++s) EXPECT_EQ(full[s], dense[s]) << "full budget, step " << s;

    auto small = make_runtime(*dec, kv, SparseMode::kSketch, 128);
    dec->set_sparse(small.get());
    const auto plain = run(*dec, kv, pool, prompt, kSteps, &tokens);
    auto hot = make_tier(*dec, kv, 10);
    dec->set_hot_chunks(hot.get());
    const auto tiered = run(*dec, kv, pool, prompt, kSteps, &tokens);
    dec->set_hot_chunks(nullptr);
    dec->set_sparse(nullptr);
    for (size_t s = 0; s < plain.size(); ++s) EXPECT_EQ(tiered[s], plain[s]) << "tier, step " << s;
    EXPECT_GT(small->stats().fetch_misses, 0);
    EXPECT_EQ(small->stats().fetch_bytes, small->stats().fetch_misses * hot->piece_bytes());
    EXPECT_EQ(hot->slots_used(), 0);
    EXPECT_EQ(kv.pool().n_used(), 0);
  }
}

// Resident sinks + window ring: the same logits as reading them from the pages, and the rows
// copied add up — the first sparse step copies the sinks and the ring's chunks, every later
// step one row per (layer, kv head).
TEST(SparseDecoder, ResidentSinksAndWindowRingEqualThePages) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 128);
  ThreadPool pool;
  const auto prompt = random_prompt(700, c.n_vocab);
  constexpr int kSteps = 5;
  auto rt = make_runtime(*dec, kv, SparseMode::kSketch, 128);
  dec->set_sparse(rt.get());
  std::vector<int32_t> tokens;
  auto plain_tier = make_tier(*dec, kv, 10);
  dec->set_hot_chunks(plain_tier.get());
  const auto plain = run(*dec, kv, pool, prompt, kSteps, nullptr, &tokens);
  dec->set_hot_chunks(nullptr);
  plain_tier.reset();
  auto hot = make_tier(*dec, kv, 10, /*resident_seqs=*/1);
  ASSERT_EQ(hot->ring_chunks(), 3);
  dec->set_hot_chunks(hot.get());
  rt->reset_stats();
  const auto resident = run(*dec, kv, pool, prompt, kSteps, &tokens);
  dec->set_hot_chunks(nullptr);
  dec->set_sparse(nullptr);
  for (size_t s = 0; s < plain.size(); ++s) EXPECT_EQ(resident[s], plain[s]) << "step " << s;
  const int64_t sets = static_cast<int64_t>(c.n_layer) * c.n_head_kv;
  const int64_t row = kv_token_bytes(kv.geometry().dtype, c.head_dim);
  const int32_t n0 = static_cast<int32_t>(prompt.size()) + 1;          // keys at the first decode step
  const int32_t ring_begin = ((n0 - 1) / 16 - 3 + 1) * 16;
  EXPECT_EQ(rt->stats().resident_bytes, sets * row * (16 + (n0 - ring_begin) + (kSteps - 1)));
  EXPECT_EQ(hot->resident_regions_used(), 0);  // run() released the sequence
}

TEST(SparseDecoder, EngineWithDeviceTierReleasesEveryLeaseAndSlot) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  auto tok = make_tokenizer(dec->file());
  ASSERT_TRUE(tok.is_ok());
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 96);
  ThreadPool pool;
  auto rt = make_runtime(*dec, kv, SparseMode::kQuest, 32, /*min_context=*/64);
  auto hot = make_tier(*dec, kv, 12, /*resident_seqs=*/2);  // 4 requests, 2 regions: some read the pages
  dec->set_sparse(rt.get());
  dec->set_hot_chunks(hot.get());
  {
    Engine engine(*dec, **tok, kv, pool, EngineConfig{.max_num_seqs = 4});
    engine.start();
    std::vector<Engine::Submitted> reqs;
    for (int i = 0; i < 4; ++i) {
      RequestParams p;
      p.prompt = random_prompt(100 + 30 * i, c.n_vocab);
      p.max_tokens = 6;
      p.ignore_eos = true;
      p.sampling.temperature = 0;
      auto r = engine.submit(std::move(p));
      ASSERT_TRUE(std::holds_alternative<Engine::Submitted>(r));
      reqs.push_back(std::get<Engine::Submitted>(r));
    }
    engine.cancel(reqs[1].id);
    for (auto& r : reqs) {
      RequestEvent ev;
      while (r.channel->pop(ev, std::chrono::milliseconds(60000)) && ev.finish == EventFinish::kNone) {
      }
      EXPECT_NE(ev.finish, EventFinish::kNone);
    }
    EngineStats s = engine.stats();
    for (int i = 0; i < 200 && (s.running || s.waiting); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s = engine.stats();
    }
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.kv_pages_used, 0);
    EXPECT_EQ(s.kv_leases_live, 0);
    EXPECT_EQ(s.device_slots_used, 0);
    EXPECT_EQ(s.device_slots_total, static_cast<int64_t>(c.n_layer) * c.n_head_kv * 12);
    EXPECT_GT(s.kv_fetch_hits + s.kv_fetch_misses, 0);
    EXPECT_EQ(s.kv_fetch_bytes, s.kv_fetch_misses * hot->piece_bytes());
    EXPECT_EQ(hot->resident_regions_used(), 0);  // every finished / cancelled lease gave its region back
    EXPECT_GT(hot->total().resident_bytes, 0);
    engine.stop();
  }
  dec->set_hot_chunks(nullptr);
  dec->set_sparse(nullptr);
  EXPECT_EQ(hot->slots_pinned(), 0);
}

}  // namespace
}  // namespace hs
