// tests/unit/engine/test_engine_hybrid.cpp — the serving engine on the tiny qwen35 fixture
// (tests/fixtures/hybrid/qwen35-tiny, a random Qwen3.5 of 8 layers: 6 Gated-DeltaNet + 2 full
// attention): batched greedy output equals the single-sequence loop, a follow-up whose prefix is
// cached resumes from a recurrent-state checkpoint with the logits of a full recompute (also on the
// model split over two CPU ranks, whose checkpoints copy every rank's state share), and a storm of
// submits / cancels / finishes / preemptions leaves every page, lease and state slot free.
// (Excluded under ASan like test_engine_model: -O0 forward passes are slow.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/generate.h"
#include "model/dummy_model.h"
#include "model/hybrid_decoder.h"

namespace hs {
namespace {

const std::string kDir = std::string(HS_FIXTURES_DIR) + "/hybrid/qwen35-tiny";

struct Tiny {
  std::unique_ptr<HybridDecoder> dec;
  std::unique_ptr<gguf::File> vocab;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ThreadPool> pool;
};

Tiny& tiny() {
  static Tiny* t = [] {
    auto* m = new Tiny;
    auto dec = HybridDecoder::load_hf(kDir);
    EXPECT_TRUE(dec.is_ok()) << dec.status().message();
    m->dec = std::move(*dec);
    m->vocab = std::move(*make_vocab_file("synthetic", m->dec->config().n_vocab));
    m->tok = std::move(*make_tokenizer(*m->vocab));
    m->pool = std::make_unique<ThreadPool>();
    return m;
  }();
  return *t;
}

// A KV cache and a state pool attached to a model (the tiny one unless given; the pool detaches
// when it dies). A split model's cache holds block tables only (its ranks keep their pages).
struct Caches {
  HybridDecoder* dec;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<RecurrentPool> states;
  Caches(int32_t n_pages, int32_t n_slots, int32_t n_ckpt, HybridDecoder* model = nullptr)
      : dec(model ? model : tiny().dec.get()) {
    kv = std::make_unique<KvCache>(dec->kv_geometry(16), n_pages, 256, dec->tensor_parallel_size() == 1);
    states = std::make_unique<RecurrentPool>(*kv, n_slots, n_ckpt);
    EXPECT_TRUE(dec->set_states(states.get()).is_ok());
  }
  ~Caches() {
    (void)dec->set_states(nullptr);
    states.reset();
  }
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(259 + static_cast<int32_t>(rng() % (1024 - 259)));  // no specials
  return p;
}

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  RequestEvent last;
};

Collected drain(RequestChannel& ch) {
  Collected c;
  RequestEvent ev;
  for (;;) {
    if (!ch.pop(ev, std::chrono::milliseconds(60000))) { ADD_FAILURE() << "no event for 60 s"; break; }
    c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    for (auto& lp : ev.logprobs) c.logprobs.push_back(lp);
    if (ev.finish != EventFinish::kNone) { c.last = ev; break; }
  }
  return c;
}

RequestParams greedy(std::vector<int32_t> prompt, int max_tokens, int logprobs = -1) {
  RequestParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  p.logprobs = logprobs;
  return p;
}

Engine::Submitted submit_ok(Engine& e, RequestParams p) {
  auto r = e.submit(std::move(p));
  EXPECT_TRUE(std::holds_alternative<Engine::Submitted>(r));
  return std::get<Engine::Submitted>(r);
}

void expect_baseline(Engine& e) {
  for (int i = 0; i < 200 && (e.stats().running || e.stats().waiting); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const EngineStats s = e.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.kv_pages_used, 0);
  EXPECT_EQ(s.kv_leases_live, 0);
  EXPECT_EQ(s.state_slots_used, 0);
}

// got against ref, both run with the top-k log-probs: the same top-k tokens each step, and the same
// sampled token until ref's top-2 margin is too close to call (< 0.01: the next token may differ
// honestly); returns the largest |log-prob difference| over the steps compared.
double same_logprobs(const Collected& got, const Collected& ref, int k) {
  double max_diff = 0;
  EXPECT_EQ(got.logprobs.size(), ref.logprobs.size());
  for (size_t i = 0; i < std::min(got.logprobs.size(), ref.logprobs.size()); ++i) {
    const TokenLogprob& r = ref.logprobs[i];
    const TokenLogprob& g = got.logprobs[i];
    EXPECT_EQ(r.top.size(), static_cast<size_t>(k));
    EXPECT_EQ(g.top.size(), static_cast<size_t>(k));
    if (r.top.size() != static_cast<size_t>(k) || g.top.size() != static_cast<size_t>(k)) break;
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(g.top[j].first, r.top[j].first) << "step " << i << " rank " << j;
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(g.top[j].second - r.top[j].second)));
    }
    if (r.top[0].second - r.top[1].second < 0.01f) break;
    EXPECT_EQ(got.tokens[i], ref.tokens[i]) << "step " << i;
  }
  return max_diff;
}

TEST(EngineModelHybrid, BatchedGreedyEqualsSingleSequenceLoop) {
  Tiny& m = tiny();
  Caches c(128, 4, 0);
  std::mt19937 rng(42);
  const std::vector<int> lengths = {7, 45, 130, 33};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateResult> ref;
  for (int n : lengths) {
    prompts.push_back(random_prompt(rng, n));
    GenerateRequest g;
    g.prompt = prompts.back();
    g.max_tokens = 16;
    g.sampling.temperature = 0;
    g.ignore_eos = true;
    auto r = generate(*m.dec, *m.tok, *c.kv, *m.pool, g);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ref.push_back(*r);
  }
  EXPECT_EQ(c.states->n_used(), 0);
  // Prefix caching on without checkpoint slots: the engine turns it off for the hybrid model.
  Engine e(*m.dec, *m.tok, *c.kv, *m.pool, EngineConfig{.max_model_len = 1024, .max_num_seqs = 16});
  EXPECT_FALSE(e.config().enable_prefix_caching);
  EXPECT_EQ(e.config().max_num_seqs, 4);  // capped at the state slots
  e.start();
  std::vector<Engine::Submitted> subs;
  for (const auto& p : prompts) subs.push_back(submit_ok(e, greedy(p, 16)));
  for (size_t i = 0; i < prompts.size(); ++i) {
    Collected got = drain(*subs[i].channel);
    EXPECT_EQ(got.tokens, ref[i].tokens) << "prompt " << i << " (" << lengths[i] << " tokens)";
    EXPECT_EQ(got.last.finish, EventFinish::kLength);
    EXPECT_EQ(got.last.usage.cached_tokens, 0);
  }
  expect_baseline(e);
}

// The follow-up of a conversation (prompt + completion + new tokens) on an engine with state
// checkpoints against the same follow-up recomputed from scratch.
TEST(EngineModelHybrid, FollowUpResumesFromACheckpointWithTheLogitsOfAFullRecompute) {
  Tiny& m = tiny();
  std::mt19937 rng(7);
  const std::vector<int32_t> first = random_prompt(rng, 45);
  const std::vector<int32_t> extra = random_prompt(rng, 10);
  const int k = 10;

  std::vector<int32_t> follow;
  Collected cached, full;
  EngineStats st;
  {
    Caches c(128, 4, 8);
    Engine e(*m.dec, *m.tok, *c.kv, *m.pool, EngineConfig{.max_model_len = 1024, .max_num_seqs = 4});
    ASSERT_TRUE(e.config().enable_prefix_caching);
    e.start();
    Collected a = drain(*submit_ok(e, greedy(first, 20)).channel);
    ASSERT_EQ(a.tokens.size(), 20u);
    follow = first;
    follow.insert(follow.end(), a.tokens.begin(), a.tokens.end());
    follow.insert(follow.end(), extra.begin(), extra.end());  // 75 tokens
    cached = drain(*submit_ok(e, greedy(follow, 8, k)).channel);
    st = e.stats();
    expect_baseline(e);
  }
  {
    Caches c(128, 4, 0);
    Engine e(*m.dec, *m.tok, *c.kv, *m.pool, EngineConfig{.max_model_len = 1024, .max_num_seqs = 4,
                                                          .enable_prefix_caching = false});
    e.start();
    full = drain(*submit_ok(e, greedy(follow, 8, k)).channel);
    expect_baseline(e);
  }
  // The first request computed 45 + 19 tokens: its rolling checkpoint is at 64, the 4 full pages.
  EXPECT_EQ(cached.last.usage.cached_tokens, 64);
  EXPECT_EQ(full.last.usage.cached_tokens, 0);
  EXPECT_EQ(st.state_checkpoint_restores, 1);
  EXPECT_GE(st.state_checkpoint_saves, 2);  // the prompt checkpoint (32) and the rolling one
  ASSERT_FALSE(full.logprobs.empty());
  // Same logits (log-probs of the top k) until the reference is too close to call.
  const double max_diff = same_logprobs(cached, full, k);
  EXPECT_LT(max_diff, 1e-3) << "restored state gives other logits than a full recompute";
  std::printf("follow-up from a checkpoint vs full recompute: %zu steps, max |logprob diff| %.3g\n",
              full.logprobs.size(), max_diff);
}

// The tiny model split over two CPU ranks (tensor parallelism: each rank its key heads' recurrent
// state) serves the one-rank model's greedy tokens, and a follow-up resumes from a checkpoint (every
// rank's state share copied and restored) with the one-rank full recompute's logits.
TEST(EngineModelHybrid, SplitOverTwoRanksServesTheSameTokensAndResumesFromCheckpoints) {
  Tiny& m = tiny();
  auto split = HybridDecoder::load_hf(kDir, Device::kCpu, 2);
  ASSERT_TRUE(split.is_ok()) << split.status().message();
  ASSERT_EQ((*split)->tensor_parallel_size(), 2);
  std::mt19937 rng(7);
  const std::vector<int32_t> first = random_prompt(rng, 45);
  const std::vector<int32_t> extra = random_prompt(rng, 10);
  const int k = 10;
  Collected a_one, a_split, cached, full;
  EngineStats st;
  {
    Caches c(128, 4, 8, split->get());
    Engine e(**split, *m.tok, *c.kv, *m.pool, EngineConfig{.max_model_len = 1024, .max_num_seqs = 4});
    ASSERT_TRUE(e.config().enable_prefix_caching);
    e.start();
    a_split = drain(*submit_ok(e, greedy(first, 20, 2)).channel);
    ASSERT_EQ(a_split.tokens.size(), 20u);
    std::vector<int32_t> follow = first;
    follow.insert(follow.end(), a_split.tokens.begin(), a_split.tokens.end());
    follow.insert(follow.end(), extra.begin(), extra.end());
    cached = drain(*submit_ok(e, greedy(follow, 8, k)).channel);
    st = e.stats();
    expect_baseline(e);
    Caches c1(128, 4, 0);
    Engine one(*m.dec, *m.tok, *c1.kv, *m.pool,
               EngineConfig{.max_model_len = 1024, .max_num_seqs = 4, .enable_prefix_caching = false});
    one.start();
    a_one = drain(*submit_ok(one, greedy(first, 20, 2)).channel);
    full = drain(*submit_ok(one, greedy(follow, 8, k)).channel);
    expect_baseline(one);
  }
  for (size_t i = 0; i < a_one.tokens.size(); ++i) {
    ASSERT_EQ(a_split.tokens[i], a_one.tokens[i]) << "step " << i;
    if (a_one.logprobs[i].top[0].second - a_one.logprobs[i].top[1].second < 0.01f) break;
  }
  EXPECT_EQ(cached.last.usage.cached_tokens, 64);
  EXPECT_EQ(st.state_checkpoint_restores, 1);
  ASSERT_FALSE(full.logprobs.empty());
  const double max_diff = same_logprobs(cached, full, k);
  // As the one-rank checkpoint tests' bound (1.1e-4 seen: each rank's int8x2 partial sums round
  // on their own).
  EXPECT_LT(max_diff, 1e-3) << "split model from a checkpoint vs one rank from scratch";
  std::printf("split over 2 ranks, follow-up from a checkpoint vs one rank from scratch: max |logprob diff| %.3g\n",
              max_diff);
}

// Agents sharing a system prompt: the second conversation leaves a divergence checkpoint at the
// end of the shared pages, the third resumes from it with the logits of a full recompute.
TEST(EngineModelHybrid, ConversationsSharingASystemPromptResumeFromTheDivergenceCheckpoint) {
  Tiny& m = tiny();
  std::mt19937 rng(11);
  const std::vector<int32_t> sys = random_prompt(rng, 90);  // 5 full pages + 10 tokens
  auto conv = [&] {
    std::vector<int32_t> p = sys;
    auto own = random_prompt(rng, 25);
    p.insert(p.end(), own.begin(), own.end());
    return p;
  };
  const std::vector<int32_t> a = conv(), b = conv(), c = conv();
  const int k = 10;
  Collected got_b, got_c, full_c;
  EngineStats st;
  {
    Caches cc(128, 4, 8);
    Engine e(*m.dec, *m.tok, *cc.kv, *m.pool, EngineConfig{.max_model_len = 1024, .max_num_seqs = 4});
    e.start();
    drain(*submit_ok(e, greedy(a, 4)).channel);
    got_b = drain(*submit_ok(e, greedy(b, 4)).channel);
    got_c = drain(*submit_ok(e, greedy(c, 6, k)).channel);
    st = e.stats();
    expect_baseline(e);
  }
  {
    Caches cc(128, 4, 0);
    Engine e(*m.dec, *m.tok, *cc.kv, *m.pool,
             EngineConfig{.max_model_len = 1024, .max_num_seqs = 4, .enable_prefix_caching = false});
    e.start();
    full_c = drain(*submit_ok(e, greedy(c, 6, k)).channel);
    expect_baseline(e);
  }
  EXPECT_EQ(got_b.last.usage.cached_tokens, 0);   // a's checkpoint (its prompt's, 112) lies past the shared 80
  EXPECT_EQ(got_c.last.usage.cached_tokens, 80);  // b's divergence checkpoint
  EXPECT_EQ(st.state_checkpoint_restores, 1);
  ASSERT_FALSE(full_c.logprobs.empty());
  const double max_diff = same_logprobs(got_c, full_c, k);
  EXPECT_LT(max_diff, 1e-3);
  std::printf("shared system prompt, third conversation from the divergence checkpoint: max |logprob diff| %.3g\n",
              max_diff);
}

// Random submits (from shared prefixes), cancels and lengths through the engine with a KV cache
// small enough to preempt and few checkpoint slots: nothing fails, everything comes back, and
// every request that ran to its length produced what it produces alone (preempted ones resumed
// from a checkpoint or recomputed), up to the first step the reference cannot call (top-2 margin
// < 0.01: chunking differs, so the last bits of the logits may).
TEST(EngineModelHybrid, StormOfStartsCancelsAndFinishesReturnsToBaseline) {
  Tiny& m = tiny();
  const char* env = std::getenv("HS_TEST_SEED");
  const unsigned seed = env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  struct Req {
    std::vector<int32_t> prompt;
    int max_tokens;
    Collected got;
  };
  std::vector<Req> reqs;
  EngineStats st;
  {
    Caches c(16, 4, 4);  // 256 tokens of KV for up to 4 sequences of up to 143: preemption
    Engine e(*m.dec, *m.tok, *c.kv, *m.pool,
             EngineConfig{.max_model_len = 256, .max_num_seqs = 4, .max_num_batched_tokens = 48});
    e.start();
    std::vector<std::vector<int32_t>> bases;
    for (int i = 0; i < 3; ++i) bases.push_back(random_prompt(rng, 100));
    std::vector<Engine::Submitted> subs;
    // The first kPinned requests are whole bases run to 40 tokens and never cancelled: two of
    // them alone need 2 × 140 tokens of the 256, so the storm preempts whatever the seed.
    constexpr size_t kPinned = 3;
    for (size_t i = 0; i < 40; ++i) {
      const auto& b = bases[i < kPinned ? i : rng() % bases.size()];
      std::vector<int32_t> p(b.begin(), i < kPinned ? b.end() : b.begin() + 5 + rng() % 95);
      if (i >= kPinned) {
        auto more = random_prompt(rng, static_cast<int>(rng() % 4));
        p.insert(p.end(), more.begin(), more.end());
      }
      reqs.push_back({p, i < kPinned ? 40 : 1 + static_cast<int>(rng() % 40), {}});
      subs.push_back(submit_ok(e, greedy(p, reqs.back().max_tokens)));
      if (i < kPinned) continue;
      if (rng() % 4 == 0) e.cancel(subs[kPinned + rng() % (subs.size() - kPinned)].id);
      if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 5));
    }
    for (size_t i = 0; i < subs.size(); ++i) {
      reqs[i].got = drain(*subs[i].channel);
      EXPECT_NE(reqs[i].got.last.finish, EventFinish::kError) << reqs[i].got.last.error;
    }
    expect_baseline(e);
    st = e.stats();
  }
  int cancelled = 0, done = 0, compared = 0;
  Caches c(32, 1, 0);
  Engine alone(*m.dec, *m.tok, *c.kv, *m.pool,
               EngineConfig{.max_model_len = 512, .max_num_seqs = 1, .enable_prefix_caching = false});
  alone.start();
  for (const Req& r : reqs) {
    cancelled += r.got.last.finish == EventFinish::kCancelled;
    if (r.got.last.finish != EventFinish::kLength) continue;
    ++done;
    Collected ref = drain(*submit_ok(alone, greedy(r.prompt, r.max_tokens, 2)).channel);
    ASSERT_EQ(r.got.tokens.size(), ref.tokens.size());
    for (size_t i = 0; i < ref.tokens.size(); ++i) {
      ASSERT_EQ(r.got.tokens[i], ref.tokens[i]) << "step " << i << " of a " << r.prompt.size() << "-token prompt";
      ++compared;
      if (ref.logprobs[i].top[0].second - ref.logprobs[i].top[1].second < 0.01f) break;
    }
  }
  EXPECT_EQ(cancelled + done, 40);
  EXPECT_GT(done, 0);
  EXPECT_GT(st.preemptions_total, 0) << "the storm should preempt";
  std::printf("storm: %d finished (%d tokens equal to alone), %d cancelled, %lld preemptions, %lld checkpoint saves, "
              "%lld restores\n", done, compared, cancelled, static_cast<long long>(st.preemptions_total),
              static_cast<long long>(st.state_checkpoint_saves), static_cast<long long>(st.state_checkpoint_restores));
}

}  // namespace
}  // namespace hs
