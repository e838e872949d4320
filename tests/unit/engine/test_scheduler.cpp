// tests/unit/engine/test_scheduler.cpp — the scheduling rule without a model: budgets,
// chunking, the prefill cost limit, admission, preemption, and page accounting.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "engine/scheduler.h"

namespace hs {
namespace {

struct Harness {
  KvCache kv;
  PrefixCache prefix;
  StepCostModel cost;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;

  Harness(int n_blocks, SchedulerConfig cfg, StepCostModel c = unit_cost(), bool use_prefix = false)
      : kv(KvGeometry{1, 1, 4, 16, KvDtype::kF32}, n_blocks), prefix(kv), cost(c),
        sched(kv, use_prefix ? &prefix : nullptr, cfg, c) {}

  static StepCostModel unit_cost() {
    StepCostModel m;
    m.fixed_s = 1.0;
    m.per_token_s = 0.1;
    m.per_row_s = 0.1;
    m.per_key_full_s = 0.001;
    return m;
  }

  Sequence* add(int n_prompt, int32_t first_token = 1) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size() + 1;
    for (int i = 0; i < n_prompt; ++i) s->tokens.push_back(first_token + i);
    s->n_prompt = n_prompt;
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }

  // Runs the plan as the engine would: K/V "computed", sampled sequences get a token.
  StepPlan step() {
    StepPlan plan = sched.schedule();
    for (const auto& c : plan.chunks) c.seq->kv.n_tokens = c.seq->num_computed + c.n_tokens;
    sched.commit(plan);
    for (const auto& c : plan.chunks)
      if (c.sample) c.seq->tokens.push_back(7);
    return plan;
  }
};

bool in_plan(const StepPlan& p, const Sequence* s) {
  for (const auto& c : p.chunks)
    if (c.seq == s) return true;
  return false;
}

TEST(Scheduler, ChunksLongPromptsUnderTheTokenBudget) {
  Harness h(64, {.max_num_seqs = 4, .max_num_batched_tokens = 100, .prefill_cost_ratio = 0});
  Sequence* s = h.add(250);
  StepPlan p1 = h.step();
  ASSERT_EQ(p1.chunks.size(), 1u);
  EXPECT_EQ(p1.chunks[0].n_tokens, 100);
  EXPECT_FALSE(p1.chunks[0].sample);
  h.step();
  StepPlan p3 = h.step();
  EXPECT_EQ(p3.chunks[0].n_tokens, 50);
  EXPECT_TRUE(p3.chunks[0].sample);
  EXPECT_EQ(s->num_computed, 250);
  EXPECT_EQ(s->n_tokens(), 251);  // sampled one
  StepPlan p4 = h.step();
  EXPECT_EQ(p4.n_decodes, 1);
}

TEST(Scheduler, DecodesAlwaysRunWhileAPromptIsPrefilled) {
  Harness h(256, {.max_num_seqs = 8, .max_num_batched_tokens = 64, .prefill_cost_ratio = 0});
  std::vector<Sequence*> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(h.add(8));
  h.step();  // all four prefilled together (32 tokens)
  Sequence* big = h.add(1000);
  for (int step = 0; step < 30; ++step) {
    StepPlan p = h.step();
    EXPECT_LE(p.n_tokens, 64);
    for (Sequence* s : streams) EXPECT_TRUE(in_plan(p, s)) << "step " << step;
    EXPECT_GE(p.n_decodes, 4);
  }
  EXPECT_GT(big->num_computed, 0);
}

TEST(Scheduler, PrefillCostStaysWithinTheRatioOfTheDecodeStep) {
  const double ratio = 2.0;
  Harness h(2048, {.max_num_seqs = 8, .max_num_batched_tokens = 512, .prefill_cost_ratio = ratio});
  for (int i = 0; i < 4; ++i) h.add(4);
  h.step();
  Sequence* big = h.add(16000);
  int steps = 0;
  while (big->num_computed < 16000 && steps < 3000) {
    const int32_t pos0 = big->num_computed;
    StepPlan p = h.step();
    ++steps;
    double decode = h.cost.fixed_s, prefill = 0;
    int32_t n_big = 0;
    for (const auto& c : p.chunks) {
      if (c.seq == big) { prefill += h.cost.chunk_cost(pos0, c.n_tokens); n_big = c.n_tokens; }
      else decode += h.cost.chunk_cost(c.seq->num_computed - 1, 1) + h.cost.per_row_s;
    }
    ASSERT_GE(n_big, 1) << "prefill must progress every step";
    if (n_big > 1) { ASSERT_LE(prefill, (ratio - 1) * decode * (1 + 1e-9)); }
  }
  EXPECT_GT(big->num_computed, 1000);
}

TEST(Scheduler, AdmitsFirstComeFirstServedUpToMaxNumSeqs) {
  Harness h(64, {.max_num_seqs = 2, .max_num_batched_tokens = 512, .prefill_cost_ratio = 0});
  Sequence* a = h.add(10);
  Sequence* b = h.add(10);
  Sequence* c = h.add(10);
  StepPlan p = h.step();
  EXPECT_TRUE(in_plan(p, a));
  EXPECT_TRUE(in_plan(p, b));
  EXPECT_FALSE(in_plan(p, c));
  EXPECT_EQ(h.sched.waiting().size(), 1u);
  h.sched.remove(a);
  p = h.step();
  EXPECT_TRUE(in_plan(p, c));
}

TEST(Scheduler, AdmissionWaitsForPagesAndPreemptsNewestWhenFull) {
  // 4 pages of 16 tokens. Two sequences of 24 tokens take 2 pages each.
  Harness h(4, {.max_num_seqs = 4, .max_num_batched_tokens = 512, .prefill_cost_ratio = 0});
  Sequence* a = h.add(24);
  Sequence* b = h.add(24);
  Sequence* c = h.add(8);
  h.step();
  EXPECT_EQ(h.sched.running().size(), 2u);
  EXPECT_EQ(h.sched.waiting().front(), c);  // no free page for c
  // Decode until a needs a third page: b (newest) is preempted to make room.
  bool preempted = false;
  for (int i = 0; i < 20 && !preempted; ++i) {
    StepPlan p = h.step();
    for (Sequence* s : p.preempted) preempted |= (s == b);
  }
  EXPECT_TRUE(preempted);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(b->kv.blocks.empty());
  EXPECT_EQ(h.sched.waiting().front(), b);  // back at the front of the queue
  EXPECT_EQ(b->n_preemptions, 1);
  EXPECT_TRUE(std::find(h.sched.running().begin(), h.sched.running().end(), a) != h.sched.running().end());
}

TEST(Scheduler, PrefixCacheSkipsComputedPagesButComputesTheLastToken) {
  Harness h(64, {.max_num_seqs = 4, .max_num_batched_tokens = 512, .prefill_cost_ratio = 0},
            Harness::unit_cost(), /*use_prefix=*/true);
  Sequence* a = h.add(40);
  h.step();
  Sequence* b = h.add(40);  // same tokens
  StepPlan p = h.step();
  EXPECT_EQ(b->cached_tokens, 32);  // two full pages of 16; the rest is computed
  for (const auto& c : p.chunks)
    if (c.seq == b) { EXPECT_EQ(c.n_tokens, 8); }
  Sequence* c = h.add(32);  // whole prompt cached: the last page is recomputed for logits
  h.step();
  EXPECT_EQ(c->cached_tokens, 16);
  (void)a;
}

// Random arrivals, lengths and cancellations: everything finishes and all pages return.
TEST(Scheduler, RandomWorkloadDrainsAndReturnsEveryPage) {
  std::random_device rd;
  const unsigned seed = rd();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  Harness h(48, {.max_num_seqs = 6, .max_num_batched_tokens = 64, .prefill_cost_ratio = 2.0},
            Harness::unit_cost(), /*use_prefix=*/true);
  std::vector<Sequence*> active;
  int finished = 0, started = 0;
  for (int it = 0; it < 3000; ++it) {
    if (started < 300 && rng() % 3 == 0) {
      active.push_back(h.add(1 + rng() % 100, static_cast<int32_t>(rng() % 3)));
      active.back()->params.max_tokens = 1 + rng() % 40;
      ++started;
    }
    h.step();
    for (size_t i = 0; i < active.size();) {
      Sequence* s = active[i];
      const bool done = s->n_generated() >= s->params.max_tokens || rng() % 200 == 0;
      if (done) {
        h.sched.remove(s);
        active.erase(active.begin() + i);
        ++finished;
      } else {
        ++i;
      }
    }
    int64_t held = 0;
    for (const auto& s : h.seqs) held += static_cast<int64_t>(s->kv.blocks.size());
    ASSERT_GE(held, h.kv.pool().n_used());  // shared pages count once in the pool
  }
  for (Sequence* s : active) h.sched.remove(s);
  EXPECT_TRUE(h.sched.idle());
  EXPECT_EQ(h.kv.pool().n_used(), 0);
  EXPECT_GT(finished, 100);
}

}  // namespace
}  // namespace hs

namespace hs {
namespace {

// The online calibration recovers separate scales for the matmul and attention parts.
TEST(StepCost, CalibrationRecoversBothScales) {
  StepCostModel m = Harness::unit_cost();
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(0.1, 2.0);
  for (int i = 0; i < 500; ++i) {
    const double other = u(rng), attn = u(rng);
    m.observe(other, attn, 2.0 * other + 5.0 * attn);
  }
  EXPECT_NEAR(m.other_scale(), 2.0, 0.3);  // the ridge pulls slightly towards the common scale
  EXPECT_NEAR(m.attn_scale(), 5.0, 0.3);
  EXPECT_NEAR(m.chunk_cost(100, 4), m.other_scale() * m.chunk_other(4) + m.attn_scale() * m.chunk_attn(100, 4), 1e-12);
  // Degenerate input (one direction only) keeps the scales finite and positive.
  StepCostModel d = Harness::unit_cost();
  for (int i = 0; i < 10; ++i) d.observe(1.0, 0.0, 3.0);
  EXPECT_GT(d.other_scale(), 0);
  EXPECT_GT(d.attn_scale(), 0);
}

}  // namespace
}  // namespace hs
