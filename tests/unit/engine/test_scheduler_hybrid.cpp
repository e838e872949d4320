// tests/unit/engine/test_scheduler_hybrid.cpp — the scheduler and prefix cache with recurrent
// state (hybrid models) without a model: each state slot holds a stand-in for the recurrent state
// (a fold of the tokens it has consumed, and their count), so any step that ran from a wrong or
// missing state is caught. The checkpoint policy (prompt checkpoint kept, one rolling checkpoint
// per sequence), restores of cached prefixes, and a storm of starts / cancels / finishes /
// preemptions that leaves pages, leases, slots and the state consistent; the divergence
// checkpoint that serves conversations sharing only a system prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>

#include "engine/scheduler.h"

namespace hs {
namespace {

constexpr int P = 16;

struct FakeState {
  uint64_t fold = 0;
  int32_t n = 0;
};

uint64_t fold_tokens(uint64_t h, std::span<const int32_t> t) {
  for (int32_t x : t) h = (h ^ static_cast<uint64_t>(x + 1)) * 0x100000001b3ull;
  return h;
}

struct HybridHarness {
  KvCache kv;
  RecurrentPool states;
  PrefixCache prefix;
  StepCostModel cost;
  Scheduler sched;
  std::vector<FakeState> mem;  // [n_total]
  std::vector<std::unique_ptr<Sequence>> seqs;
  int bad_steps = 0;

  HybridHarness(int n_blocks, int n_slots, int n_ckpt, SchedulerConfig cfg)
      : kv(KvGeometry{1, 1, 4, P, KvDtype::kF32}, n_blocks, 64), states(kv, n_slots, n_ckpt), prefix(kv),
        cost(unit_cost()), sched(kv, (prefix.set_states(&states), &prefix), cfg, cost),
        mem(static_cast<size_t>(n_slots + n_ckpt)) {
    states.set_copier([this](int32_t src, int32_t dst) {
      mem[dst] = mem[src];
      return Status::ok();
    });
  }

  static StepCostModel unit_cost() {
    StepCostModel m;
    m.fixed_s = 1.0;
    m.per_token_s = 0.1;
    m.per_row_s = 0.1;
    m.per_key_full_s = 0.001;
    return m;
  }

  Sequence* add(std::vector<int32_t> prompt) {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size() + 1;
    s->tokens = std::move(prompt);
    s->n_prompt = s->n_tokens();
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }

  // Runs the plan as HybridDecoder would: every chunk's sequence needs its slot, a fresh slot
  // only at position 0, and the state in it must be exactly that of the tokens before the chunk.
  StepPlan step(int32_t next_token = 7) {
    StepPlan plan = sched.schedule();
    for (const auto& c : plan.chunks) {
      Sequence* s = c.seq;
      bool fresh = false;
      auto slot = states.slot(s->kv, &fresh);
      if (!slot.is_ok()) {
        ADD_FAILURE() << "no state slot for a scheduled sequence: " << slot.status().message();
        ++bad_steps;
        continue;
      }
      FakeState& st = mem[*slot];
      if (fresh) {
        if (s->num_computed != 0) {
          ADD_FAILURE() << "sequence resumed at " << s->num_computed << " without its state";
          ++bad_steps;
        }
        st = FakeState{};
      }
      const std::span<const int32_t> done(s->tokens.data(), static_cast<size_t>(s->num_computed));
      if (st.n != s->num_computed || st.fold != fold_tokens(0, done)) {
        ADD_FAILURE() << "state of " << st.n << " tokens where " << s->num_computed << " are computed";
        ++bad_steps;
      }
      st.fold = fold_tokens(st.fold, std::span<const int32_t>(s->tokens.data() + s->num_computed,
                                                              static_cast<size_t>(c.n_tokens)));
      st.n += c.n_tokens;
      s->kv.n_tokens = s->num_computed + c.n_tokens;
    }
    sched.commit(plan);
    for (const auto& c : plan.chunks)
      if (c.sample) c.seq->tokens.push_back(next_token);
    return plan;
  }
};

std::vector<int32_t> iota_tokens(int n, int32_t first = 1) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(first + i);
  return t;
}

TEST(SchedulerHybrid, PromptCheckpointCutsTheChunkAndServesTheSamePrompt) {
  HybridHarness h(64, 4, 8, {.max_num_seqs = 4, .max_num_batched_tokens = 512, .prefill_cost_ratio = 0});
  Sequence* a = h.add(iota_tokens(40));
  StepPlan p1 = h.step();
  ASSERT_EQ(p1.chunks.size(), 1u);
  EXPECT_EQ(p1.chunks[0].n_tokens, 32);  // cut at floor((40 - 1) / 16) * 16
  EXPECT_FALSE(p1.chunks[0].sample);
  StepPlan p2 = h.step();
  EXPECT_EQ(p2.chunks[0].n_tokens, 8);
  EXPECT_TRUE(p2.chunks[0].sample);
  EXPECT_EQ(h.prefix.state_saves(), 1);
  EXPECT_EQ(h.states.n_checkpoints_used(), 1);
  h.sched.remove(a);
  EXPECT_EQ(h.states.n_used(), 0);  // the slot came back with the KV

  Sequence* b = h.add(iota_tokens(40));
  h.step();
  EXPECT_EQ(b->cached_tokens, 32);
  EXPECT_EQ(h.prefix.state_restores(), 1);
  EXPECT_EQ(b->num_computed, 40);
  h.sched.remove(b);

  // A prompt of exactly 2 pages: its checkpoint is at 16, so the same prompt recomputes one page.
  Sequence* c = h.add(iota_tokens(32, 500));
  h.step();
  h.step();
  h.sched.remove(c);
  Sequence* d = h.add(iota_tokens(32, 500));
  h.step();
  EXPECT_EQ(d->cached_tokens, 16);
  h.sched.remove(d);
  EXPECT_EQ(h.bad_steps, 0);
}

TEST(SchedulerHybrid, RollingCheckpointFollowsTheDecodeAndServesAFollowUp) {
  HybridHarness h(64, 4, 8, {.max_num_seqs = 4, .max_num_batched_tokens = 512, .prefill_cost_ratio = 0});
  Sequence* a = h.add(iota_tokens(20));  // prompt checkpoint at 16
  int t = 1000;
  while (a->num_computed < 70) h.step(t++);  // decodes cross 32, 48, 64
  EXPECT_EQ(a->num_computed, 70);
  // Prompt checkpoint (16) + the rolling one (64); 32 and 48 were replaced as it moved on.
  EXPECT_EQ(h.states.n_checkpoints_used(), 2);
  EXPECT_EQ(h.prefix.state_saves(), 4);
  std::vector<int32_t> follow = a->tokens;  // prompt + completion
  for (int i = 0; i < 9; ++i) follow.push_back(3000 + i);
  h.sched.remove(a);

  Sequence* b = h.add(follow);
  h.step();
  EXPECT_EQ(b->cached_tokens, 64);  // the rolling checkpoint; KV pages of 0..64 reused
  EXPECT_EQ(h.prefix.state_restores(), 1);
  h.sched.remove(b);

  // A follow-up diverging inside the completion restores the prompt checkpoint.
  std::vector<int32_t> early(follow.begin(), follow.begin() + 40);
  early.push_back(9999);
  Sequence* c = h.add(early);
  h.step();
  EXPECT_EQ(c->cached_tokens, 16);
  h.sched.remove(c);
  EXPECT_EQ(h.bad_steps, 0);
}

// Conversations sharing a system prompt S (50 tokens) but nothing after it: the first one's
// checkpoints lie past S; the second finds 3 cached pages inside S without a checkpoint, recomputes
// them with its chunk ended at 48 and keeps the divergence checkpoint there; the third restores it.
TEST(SchedulerHybrid, DivergenceCheckpointServesConversationsSharingAPrefix) {
  HybridHarness h(64, 4, 8, {.max_num_seqs = 4, .max_num_batched_tokens = 512, .prefill_cost_ratio = 0});
  const std::vector<int32_t> sys = iota_tokens(50, 1);
  auto conv = [&](int32_t first) {
    std::vector<int32_t> p = sys;
    for (int i = 0; i < 30; ++i) p.push_back(first + i);
    return p;
  };
  Sequence* a = h.add(conv(1000));
  h.step();
  h.step();
  EXPECT_EQ(a->num_computed, 80);
  h.sched.remove(a);
  EXPECT_EQ(h.prefix.state_saves(), 2);  // its prompt checkpoint (64) and the rolling one (80), past S

  Sequence* b = h.add(conv(2000));
  StepPlan p1 = h.step();
  EXPECT_EQ(b->cached_tokens, 0);  // KV for 48 tokens is cached, but no state inside S
  ASSERT_EQ(p1.chunks.size(), 1u);
  EXPECT_EQ(p1.chunks[0].n_tokens, 48);  // ends at the divergence checkpoint
  EXPECT_EQ(h.prefix.state_saves(), 3);
  while (b->num_computed < 80) h.step();
  h.sched.remove(b);

  Sequence* c = h.add(conv(3000));
  h.step();
  EXPECT_EQ(c->cached_tokens, 48);
  EXPECT_EQ(h.prefix.state_restores(), 1);
  while (c->num_computed < 80) h.step();
  h.sched.remove(c);
  EXPECT_EQ(h.states.n_used(), 0);
  EXPECT_EQ(h.bad_steps, 0);
}

TEST(SchedulerHybrid, WithoutCheckpointSlotsNothingIsReused) {
  HybridHarness h(64, 2, 0, {.max_num_seqs = 2, .max_num_batched_tokens = 512, .prefill_cost_ratio = 0});
  Sequence* a = h.add(iota_tokens(40));
  h.step();
  h.sched.remove(a);
  Sequence* b = h.add(iota_tokens(40));
  h.step();
  EXPECT_EQ(b->cached_tokens, 0);  // pages are cached, but no state for their end
  EXPECT_EQ(b->num_computed, 40);
  h.sched.remove(b);
  EXPECT_EQ(h.bad_steps, 0);
}

// Random arrivals from a few shared prefixes, random cancels and lengths, few pages (so
// preemption happens) and few checkpoint slots (so they are overwritten): every step runs from
// the right state, and at the end pages, leases and slots are all back. The storm opens with
// four whole-base prompts that run to 40 tokens uncancelled: 4 × 120 tokens need 32 pages of
// the 24, so preemption happens whatever the seed (HS_TEST_SEED=... replays one).
TEST(SchedulerHybrid, StormKeepsStatesRightAndReturnsEverything) {
  const char* env = std::getenv("HS_TEST_SEED");
  const unsigned seed = env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  HybridHarness h(24, 5, 6, {.max_num_seqs = 5, .max_num_batched_tokens = 48, .prefill_cost_ratio = 2.0});
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 4; ++i) bases.push_back(iota_tokens(80, 100 * (i + 1)));
  std::vector<Sequence*> active, pinned;  // pinned: the opening burst, never cancelled
  int finished = 0, started = 0;
  for (int i = 0; i < 4; ++i) {
    Sequence* s = h.add(bases[i]);
    s->params.max_tokens = 40;
    active.push_back(s);
    pinned.push_back(s);
    ++started;
  }
  for (int it = 0; it < 3000; ++it) {
    if (started < 300 && rng() % 3 == 0) {
      const auto& base = bases[rng() % bases.size()];
      std::vector<int32_t> prompt(base.begin(), base.begin() + 1 + rng() % base.size());
      for (int k = rng() % 3; k > 0; --k) prompt.push_back(static_cast<int32_t>(rng() % 50));
      Sequence* s = h.add(prompt);
      s->params.max_tokens = 1 + rng() % 40;
      active.push_back(s);
      ++started;
    }
    h.step(static_cast<int32_t>(rng() % 5));
    for (size_t i = 0; i < active.size();) {
      Sequence* s = active[i];
      const bool is_pinned = std::find(pinned.begin(), pinned.end(), s) != pinned.end();
      if (s->n_generated() >= s->params.max_tokens || (rng() % 150 == 0 && !is_pinned)) {
        h.sched.remove(s);
        active.erase(active.begin() + i);
        ++finished;
      } else {
        ++i;
      }
    }
    ASSERT_LE(h.states.n_used(), static_cast<int32_t>(h.sched.running().size()) + 1);
    ASSERT_EQ(h.bad_steps, 0);
  }
  for (Sequence* s : active) h.sched.remove(s);
  EXPECT_TRUE(h.sched.idle());
  EXPECT_EQ(h.kv.pool().n_used(), 0);
  EXPECT_EQ(h.kv.leases().n_live(), 0);
  EXPECT_EQ(h.states.n_used(), 0);
  EXPECT_LE(h.states.n_checkpoints_used(), h.states.n_checkpoints());
  EXPECT_GT(finished, 100);
  EXPECT_GT(h.prefix.state_restores(), 0);
  int64_t preempted = 0;
  for (const auto& s : h.seqs) preempted += s->n_preemptions;
  EXPECT_GT(preempted, 0) << "the storm should preempt";
}

}  // namespace
}  // namespace hs
