// tests/unit/engine/test_engine_model.cpp — the serving engine on the real SmolLM2 model:
// batched greedy output equals the single-sequence loop, stop strings, cancellation,
// timeouts, the prefix cache, and that every page comes back. (Excluded under ASan: -O0
// forward passes are too slow; the scheduler tests cover the logic there.)
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "engine/engine.h"
#include "engine/generate.h"
#include "model/decoder.h"

namespace hs {
namespace {

struct Model {
  std::unique_ptr<Decoder> dec;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<ThreadPool> pool;
};

Model* load_smollm2() {
  static Model* m = [] {
    const std::string path = std::string(HS_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";
    if (!std::filesystem::exists(path)) return static_cast<Model*>(nullptr);
    auto* mm = new Model;
    mm->dec = std::move(*Decoder::load(path));
    mm->tok = std::move(*make_tokenizer(mm->dec->file()));
    const ModelConfig& c = mm->dec->config();
    mm->kv = std::make_unique<KvCache>(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 256);
    mm->pool = std::make_unique<ThreadPool>();
    return mm;
  }();
  return m;
}

#define NEED_MODEL()                                       \
  Model* m = load_smollm2();                               \
  if (!m) GTEST_SKIP() << "models/ absent (run scripts/setup)"

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  RequestEvent last;
  int n_events = 0;
};

Collected drain(RequestChannel& ch) {
  Collected c;
  RequestEvent ev;
  for (;;) {
    if (!ch.pop(ev, std::chrono::milliseconds(60000))) { ADD_FAILURE() << "no event for 60 s"; break; }
    ++c.n_events;
    c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    c.text += ev.text;
    if (ev.finish != EventFinish::kNone) { c.last = ev; break; }
  }
  return c;
}

RequestParams greedy(const Tokenizer& tok, const std::string& text, int max_tokens) {
  RequestParams p;
  p.prompt = tok.encode(text, true, false);
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0;
  return p;
}

Engine::Submitted submit_ok(Engine& e, RequestParams p) {
  auto r = e.submit(std::move(p));
  EXPECT_TRUE(std::holds_alternative<Engine::Submitted>(r));
  return std::get<Engine::Submitted>(r);
}

void expect_baseline(Engine& e) {
  for (int i = 0; i < 100 && (e.stats().running || e.stats().waiting); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const EngineStats s = e.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.kv_pages_used, 0);
}

TEST(EngineModel, ConcurrentGreedyEqualsSingleSequenceLoop) {
  NEED_MODEL();
  const std::vector<std::string> prompts = {"The capital of France is", "def fibonacci(n):",
                                            "Once upon a time, in a small village,"};
  std::vector<GenerateResult> ref;
  for (const auto& t : prompts) {
    GenerateRequest g;
    g.prompt = m->tok->encode(t, true, false);
    g.max_tokens = 20;
    g.sampling.temperature = 0;
    g.ignore_eos = true;
    ref.push_back(*generate(*m->dec, *m->tok, *m->kv, *m->pool, g));
  }
  Engine e(*m->dec, *m->tok, *m->kv, *m->pool, EngineConfig{.max_model_len = 2048, .max_num_batched_tokens = 8});
  e.start();
  std::vector<Engine::Submitted> subs;
  for (const auto& t : prompts) {
    RequestParams p = greedy(*m->tok, t, 20);
    p.ignore_eos = true;
    subs.push_back(submit_ok(e, p));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    Collected c = drain(*subs[i].channel);
    EXPECT_EQ(c.tokens, ref[i].tokens) << prompts[i];
    EXPECT_EQ(c.text, ref[i].text);
    EXPECT_EQ(c.last.finish, EventFinish::kLength);
    EXPECT_EQ(c.last.usage.completion_tokens, 20);
    EXPECT_EQ(c.last.usage.prompt_tokens, static_cast<int>(m->tok->encode(prompts[i], true, false).size()));
  }
  expect_baseline(e);
}

TEST(EngineModel, StopStringEndsTheOutputBeforeIt) {
  NEED_MODEL();
  GenerateRequest g;
  g.prompt = m->tok->encode("Count: 1, 2, 3,", true, false);
  g.max_tokens = 16;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  const GenerateResult full = *generate(*m->dec, *m->tok, *m->kv, *m->pool, g);
  ASSERT_GE(full.text.size(), 6u);
  const std::string stop = full.text.substr(3, 2);
  Engine e(*m->dec, *m->tok, *m->kv, *m->pool, EngineConfig{.max_model_len = 2048});
  e.start();
  RequestParams p = greedy(*m->tok, "Count: 1, 2, 3,", 16);
  p.ignore_eos = true;
  p.stop = {stop};
  Collected c = drain(*submit_ok(e, p).channel);
  EXPECT_EQ(c.last.finish, EventFinish::kStop);
  EXPECT_EQ(c.text, full.text.substr(0, full.text.find(stop)));
  expect_baseline(e);
}

TEST(EngineModel, CancelAndTimeoutReleaseEverything) {
  NEED_MODEL();
  Engine e(*m->dec, *m->tok, *m->kv, *m->pool, EngineConfig{.max_model_len = 2048});
  e.start();
  RequestParams p = greedy(*m->tok, "Write a long story about a dragon.", 1000);
  p.ignore_eos = true;
  auto sub = submit_ok(e, p);
  RequestEvent ev;
  ASSERT_TRUE(sub.channel->pop(ev, std::chrono::milliseconds(60000)));
  e.cancel(sub.id);
  Collected c = drain(*sub.channel);
  EXPECT_EQ(c.last.finish, EventFinish::kCancelled);
  EXPECT_LT(c.n_events, 50);  // noticed at the next step, not after the whole generation

  RequestParams t = p;
  t.timeout_s = 0.2;
  Collected ct = drain(*submit_ok(e, t).channel);
  EXPECT_EQ(ct.last.finish, EventFinish::kTimeout);
  expect_baseline(e);
  EXPECT_EQ(e.stats().requests_finished[static_cast<int>(EventFinish::kCancelled)], 1);
}

TEST(EngineModel, FollowUpReusesThePrefixAndGivesTheSameOutput) {
  NEED_MODEL();
  Engine e(*m->dec, *m->tok, *m->kv, *m->pool, EngineConfig{.max_model_len = 2048});
  e.start();
  const std::string ctx(400, 'x');
  RequestParams p = greedy(*m->tok, "Some shared context: " + ctx + " The end. Summary:", 8);
  Collected first = drain(*submit_ok(e, p).channel);
  Collected second = drain(*submit_ok(e, p).channel);
  EXPECT_EQ(first.last.usage.cached_tokens, 0);
  EXPECT_GT(second.last.usage.cached_tokens, static_cast<int>(p.prompt.size()) - 17);
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_GT(e.stats().prefix_cache_hits, 0);
  expect_baseline(e);
}

TEST(EngineModel, RejectsOverlongAndInvalidRequests) {
  NEED_MODEL();
  Engine e(*m->dec, *m->tok, *m->kv, *m->pool, EngineConfig{.max_model_len = 100, .max_waiting = 1});
  RequestParams p = greedy(*m->tok, "hello", 200);
  auto r = e.submit(p);
  ASSERT_TRUE(std::holds_alternative<SubmitError>(r));
  EXPECT_EQ(std::get<SubmitError>(r).kind, SubmitError::kTooLong);
  EXPECT_NE(std::get<SubmitError>(r).message.find("100"), std::string::npos);
  p.max_tokens = 4;
  p.prompt.push_back(1 << 30);
  EXPECT_EQ(std::get<SubmitError>(e.submit(p)).kind, SubmitError::kInvalid);
  p.prompt.pop_back();
  p.sampling.top_p = 2;
  EXPECT_EQ(std::get<SubmitError>(e.submit(p)).kind, SubmitError::kInvalid);
  p.sampling.top_p = 1;
  // Not started: the queue holds one, the second is refused.
  EXPECT_TRUE(std::holds_alternative<Engine::Submitted>(e.submit(p)));
  auto full = e.submit(p);
  ASSERT_TRUE(std::holds_alternative<SubmitError>(full));
  EXPECT_EQ(std::get<SubmitError>(full).kind, SubmitError::kQueueFull);
}


// The same model split over 3 ranks (9 heads, 3 kv heads: one kv head each; model/tensor_parallel.h)
// behind the engine: concurrent greedy requests give the one-rank model's tokens, a follow-up reuses
// the cached prefix (the ranks' pages follow the engine's block ids), and a cancel leaves every page
// free. The engine's cache holds block tables only; each rank keeps its own kv head's pages.
TEST(EngineModel, SplitOverThreeRanksServesTheSameTokensAndReusesPrefixes) {
  NEED_MODEL();
  auto split = Decoder::load(std::string(HS_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf", Device::kCpu, 3);
  ASSERT_TRUE(split.is_ok()) << split.status().message();
  ASSERT_EQ((*split)->tensor_parallel_size(), 3);
  const ModelConfig& c = (*split)->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 256, KvCache::kDefaultMaxLeases,
             /*host_pages=*/false);
  const std::vector<std::string> prompts = {"The capital of France is", "def fibonacci(n):"};
  std::vector<GenerateResult> ref;
  for (const auto& t : prompts) {
    GenerateRequest g;
    g.prompt = m->tok->encode(t, true, false);
    g.max_tokens = 16;
    g.sampling.temperature = 0;
    g.ignore_eos = true;
    ref.push_back(*generate(*m->dec, *m->tok, *m->kv, *m->pool, g));
  }
  Engine e(**split, *m->tok, kv, *m->pool, EngineConfig{.max_model_len = 2048, .max_num_batched_tokens = 8});
  e.start();
  std::vector<Engine::Submitted> subs;
  for (const auto& t : prompts) {
    RequestParams p = greedy(*m->tok, t, 16);
    p.ignore_eos = true;
    subs.push_back(submit_ok(e, p));
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(drain(*subs[i].channel).tokens, ref[i].tokens) << prompts[i];
  const std::string ctx(400, 'x');
  RequestParams p = greedy(*m->tok, "Some shared context: " + ctx + " The end. Summary:", 8);
  Collected first = drain(*submit_ok(e, p).channel);
  Collected second = drain(*submit_ok(e, p).channel);
  EXPECT_GT(second.last.usage.cached_tokens, static_cast<int>(p.prompt.size()) - 17);
  EXPECT_EQ(first.tokens, second.tokens);
  RequestParams longp = greedy(*m->tok, "Write a long story about a dragon.", 1000);
  longp.ignore_eos = true;
  auto sub = submit_ok(e, longp);
  RequestEvent ev;
  ASSERT_TRUE(sub.channel->pop(ev, std::chrono::milliseconds(60000)));
  e.cancel(sub.id);
  EXPECT_EQ(drain(*sub.channel).last.finish, EventFinish::kCancelled);
  expect_baseline(e);
}

}  // namespace
}  // namespace hs
