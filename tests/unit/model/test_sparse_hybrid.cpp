// tests/unit/model/test_sparse_hybrid.cpp — sparse attention on a hybrid model's full-attention
// layers (the tiny qwen35 of tests/fixtures/hybrid: 6 Gated-DeltaNet + 2 full-attention layers,
// head_dim 256, one kv head). The sparse runtime and the device tier are made over the KV layers
// only (kv_geometry(): 2), as app/loaded_model.cpp makes them: with a budget covering the context
// every decode logit equals dense bit for bit (sketch, Quest, and through the device tier); with
// a small budget only the selected keys are read; the key observer sees each KV layer once per
// step. In the engine, a sparse runtime + device tier + recurrent-state pool with prefix
// checkpoints (all three listening to the KV cache's lease ends) leave every page, lease, state
// slot and hot slot free after a run with a cancel and a cached follow-up.
// (Excluded under ASan with the other model tests: -O0 forward passes are slow.)
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "model/dummy_model.h"
#include "model/hybrid_decoder.h"
#include "sparse_model_util.h"
#include "sparse/hot_chunks.h"
#include "sparse/sparse_runtime.h"

namespace hs {
namespace {

const std::string kDir = std::string(HS_FIXTURES_DIR) + "/hybrid/qwen35-tiny";

std::unique_ptr<HybridDecoder> load() {
  auto d = HybridDecoder::load_hf(kDir);
  EXPECT_TRUE(d.is_ok()) << d.status().message();
  return d.is_ok() ? std::move(*d) : nullptr;
}

// Rank-64 sketches of head_dim 256 over the 2 KV layers (sparse_model_util.h).
std::unique_ptr<SparseRuntime> make_runtime(const HybridDecoder& dec, const KvCache& kv, SparseMode mode, int budget,
                                            int min_context = 0) {
  return test::make_sparse_runtime(dec, kv, mode, budget, min_context, false, false, 16, 0, /*sketch_rank=*/64);
}
using test::make_device_tier;
auto make_tier = [](const HybridDecoder& dec, KvCache& kv, int64_t slots, int32_t resident_seqs = 0) {
  return make_device_tier(dec, kv, slots, resident_seqs);
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(259 + static_cast<int32_t>(rng() % (1024 - 259)));  // no specials
  return p;
}

// Prefill `prompt` in chunks of 100, then `steps` greedy decode steps; every decode logits row.
std::vector<std::vector<float>> run(HybridDecoder& dec, KvCache& kv, RecurrentPool& states, ThreadPool& pool,
                                    const std::vector<int32_t>& prompt, int steps) {
  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  std::vector<float> logits;
  for (size_t s = 0; s < prompt.size(); s += 100) {
    Batch b;
    const size_t e = std::min(prompt.size(), s + 100);
    for (size_t i = s; i < e; ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
    EXPECT_TRUE(dec.forward(b, seqs, kv, states, pool, logits).is_ok());
  }
  std::vector<std::vector<float>> rows;
  const int V = dec.config().n_vocab;
  for (int s = 0; s < steps; ++s) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
    Batch d;
    d.add(next, seq.n_tokens, 0, true);
    EXPECT_TRUE(dec.forward(d, seqs, kv, states, pool, logits).is_ok());
    rows.emplace_back(logits.begin(), logits.begin() + V);
  }
  kv.release(seq);
  return rows;
}

TEST(SparseHybrid, BudgetCoveringContextEqualsDenseBitwise) {
  auto dec = load();
  ASSERT_TRUE(dec);
  const ModelConfig& c = dec->config();
  KvCache kv(dec->kv_geometry(16), 128);
  ASSERT_EQ(kv.geometry().n_layer, 2);
  RecurrentPool states(kv, 2);
  ThreadPool pool;
  std::mt19937 rng(11);
  const auto prompt = random_prompt(rng, 700);
  const auto dense = run(*dec, kv, states, pool, prompt, 6);
  for (bool tier : {false, true}) {
    auto hot = tier ? make_tier(*dec, kv, 64) : nullptr;  // every chunk of the ~700-token context fits
    dec->set_hot_chunks(hot.get());
    for (SparseMode mode : {SparseMode::kSketch, SparseMode::kQuest}) {
      auto rt = make_runtime(*dec, kv, mode, 4096);
      dec->set_sparse(rt.get());
      const auto sparse = run(*dec, kv, states, pool, prompt, 6);
      dec->set_sparse(nullptr);
      ASSERT_EQ(sparse.size(), dense.size());
      for (size_t s = 0; s < dense.size(); ++s)
        EXPECT_EQ(sparse[s], dense[s]) << sparse_mode_name(mode) << (tier ? " with the tier" : "") << " step " << s;
      const SparseStats st = rt->stats();
      EXPECT_EQ(st.sparse_heads, 6 * kv.geometry().n_layer * c.n_head_kv);  // the 2 KV layers, not all 8
      EXPECT_EQ(st.keys_selected, st.keys_total);
      if (tier) {
        EXPECT_GT(st.fetch_misses, 0);
        EXPECT_GT(st.fetch_hits, 0);
        EXPECT_EQ(st.fetch_bytes, st.fetch_misses * hot->piece_bytes());
        EXPECT_EQ(hot->slots_used(), 0);  // run() released the sequence: lease ended, slots freed
      }
    }
    dec->set_hot_chunks(nullptr);
  }
  EXPECT_EQ(states.n_used(), 0);
  EXPECT_EQ(kv.leases().n_live(), 0);
}

TEST(SparseHybrid, SmallBudgetReadsOnlyTheSelectedKeysAndTheObserverSeesTheKvLayers) {
  auto dec = load();
  ASSERT_TRUE(dec);
  const ModelConfig& c = dec->config();
  KvCache kv(dec->kv_geometry(16), 128);
  RecurrentPool states(kv, 2);
  ThreadPool pool;
  std::mt19937 rng(12);
  const auto prompt = random_prompt(rng, 1200);
  std::vector<int64_t> seen(kv.geometry().n_layer, 0);
  for (SparseMode mode : {SparseMode::kSketch, SparseMode::kQuest}) {
    auto rt = make_runtime(*dec, kv, mode, 64);
    dec->set_sparse(rt.get());
    std::fill(seen.begin(), seen.end(), 0);
    dec->set_key_observer([&](int layer, const float* k_pre, const float* k_post, const float* q_post, const float* v,
                              int64_t n) {
      ASSERT_GE(layer, 0);
      ASSERT_LT(layer, static_cast<int>(seen.size()));
      seen[layer] += n;
      // Partial RoPE turns only the first rope_dims of each head: the rest is k before RoPE.
      for (int64_t t = 0; t < n; ++t)
        for (int d = c.rope_dims; d < c.head_dim; ++d) ASSERT_EQ(k_pre[t * c.kv_dim() + d], k_post[t * c.kv_dim() + d]);
      ASSERT_TRUE(std::isfinite(q_post[0]) && std::isfinite(v[0]));
    });
    const auto rows = run(*dec, kv, states, pool, prompt, 4);
    dec->set_key_observer({});
    dec->set_sparse(nullptr);
    for (int64_t n : seen) EXPECT_EQ(n, 1200 + 4);  // every prefill and decode token, each KV layer once
    const SparseStats st = rt->stats();
    EXPECT_EQ(st.sparse_heads, 4 * kv.geometry().n_layer * c.n_head_kv);
    // 64 budget + 16 sinks + 32 window (+ one partial chunk) of ~1200 keys.
    EXPECT_LE(st.keys_selected, st.sparse_heads * (64 + 16 + 32 + 32));
    EXPECT_GT(st.keys_total, 6 * st.keys_selected);
    for (const auto& r : rows)
      for (float x : r) ASSERT_TRUE(std::isfinite(x));
  }
}

// The three lease listeners at once (state pool made first, then the tier: the order that lost
// the pool's lease ends when the cache had one listener), through the engine with a cancel and
// a follow-up that resumes from a checkpoint.
TEST(SparseHybrid, EngineWithSparseTierAndCheckpointsReturnsToBaseline) {
  auto dec = load();
  ASSERT_TRUE(dec);
  auto vocab = make_vocab_file("synthetic", dec->config().n_vocab);
  ASSERT_TRUE(vocab.is_ok());
  auto tok = make_tokenizer(**vocab);
  ASSERT_TRUE(tok.is_ok());
  const ModelConfig& c = dec->config();
  KvCache kv(dec->kv_geometry(16), 96, 256);
  RecurrentPool states(kv, 4, 8);
  ASSERT_TRUE(dec->set_states(&states).is_ok());
  ThreadPool pool;
  auto rt = make_runtime(*dec, kv, SparseMode::kQuest, 32, /*min_context=*/64);
  auto hot = make_tier(*dec, kv, 12, /*resident_seqs=*/2);
  dec->set_sparse(rt.get());
  dec->set_hot_chunks(hot.get());
  std::mt19937 rng(13);
  {
    Engine engine(*dec, **tok, kv, pool, EngineConfig{.max_model_len = 1024, .max_num_seqs = 4});
    ASSERT_TRUE(engine.config().enable_prefix_caching);
    engine.start();
    std::vector<std::vector<int32_t>> prompts;
    std::vector<Engine::Submitted> reqs;
    for (int i = 0; i < 4; ++i) {
      RequestParams p;
      p.prompt = random_prompt(rng, 100 + 30 * i);
      prompts.push_back(p.prompt);
      p.max_tokens = 6;
      p.ignore_eos = true;
      p.sampling.temperature = 0;
      auto r = engine.submit(std::move(p));
      ASSERT_TRUE(std::holds_alternative<Engine::Submitted>(r));
      reqs.push_back(std::get<Engine::Submitted>(r));
    }
    engine.cancel(reqs[1].id);
    std::vector<int32_t> answer0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      RequestEvent ev;
      while (reqs[i].channel->pop(ev, std::chrono::milliseconds(60000))) {
        if (i == 0) answer0.insert(answer0.end(), ev.tokens.begin(), ev.tokens.end());
        if (ev.finish != EventFinish::kNone) break;
      }
      EXPECT_NE(ev.finish, EventFinish::kNone);
      EXPECT_NE(ev.finish, EventFinish::kError) << ev.error;
    }
    // A follow-up on the first conversation: its prefix is cached (KV pages + a state checkpoint).
    RequestParams f;
    f.prompt = prompts[0];
    f.prompt.insert(f.prompt.end(), answer0.begin(), answer0.end());
    const auto more = random_prompt(rng, 20);
    f.prompt.insert(f.prompt.end(), more.begin(), more.end());
    f.max_tokens = 4;
    f.ignore_eos = true;
    f.sampling.temperature = 0;
    auto fr = engine.submit(std::move(f));
    ASSERT_TRUE(std::holds_alternative<Engine::Submitted>(fr));
    RequestEvent ev;
    while (std::get<Engine::Submitted>(fr).channel->pop(ev, std::chrono::milliseconds(60000)) &&
           ev.finish == EventFinish::kNone) {
    }
    EXPECT_EQ(ev.finish, EventFinish::kLength) << ev.error;
    EXPECT_GT(ev.usage.cached_tokens, 0);
    EngineStats s = engine.stats();
    for (int i = 0; i < 200 && (s.running || s.waiting); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s = engine.stats();
    }
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.kv_leases_live, 0);
    EXPECT_EQ(s.state_slots_used, 0);
    EXPECT_EQ(s.device_slots_used, 0);
    EXPECT_EQ(s.device_slots_total, static_cast<int64_t>(kv.geometry().n_layer) * c.n_head_kv * 12);
    EXPECT_GT(s.kv_fetch_hits + s.kv_fetch_misses, 0);
    EXPECT_EQ(hot->resident_regions_used(), 0);
    engine.stop();
  }
  EXPECT_GT(rt->stats().sparse_heads, 0);
  dec->set_hot_chunks(nullptr);
  dec->set_sparse(nullptr);
  ASSERT_TRUE(dec->set_states(nullptr).is_ok());
  EXPECT_EQ(states.n_used(), 0);
  EXPECT_EQ(hot->slots_pinned(), 0);
  EXPECT_EQ(kv.n_lease_listeners(), 2u);  // the pool and the tier, until they die
}

}  // namespace
}  // namespace hs
