// engine/scheduler.cpp — see scheduler.h.
#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

namespace hs {

Scheduler::Scheduler(KvCache& kv, PrefixCache* prefix, SchedulerConfig cfg, StepCostModel cost)
    : kv_(kv), prefix_(prefix), cfg_(cfg), cost_(cost),
      checkpoints_(prefix && prefix->states() && prefix->states()->n_checkpoints() > 0) {}

void Scheduler::add(Sequence* s) { waiting_.push_back(s); }

void Scheduler::release(Sequence* s) {
  kv_.release(s->kv);
  s->chain.page_hashes.clear();
  s->chain.restore_pending = false;
  s->chain.split_at = 0;
  s->num_computed = 0;
}

void Scheduler::remove(Sequence* s) {
  std::erase(running_, s);
  std::erase(waiting_, s);
  release(s);
}

int32_t Scheduler::pages_for(int32_t n_tokens) const {
  const int P = kv_.geometry().page_tokens;
  return (n_tokens + P - 1) / P;
}

void Scheduler::preempt(Sequence* s, StepPlan& plan) {
  std::erase(running_, s);
  release(s);
  ++s->n_preemptions;
  waiting_.push_front(s);
  plan.preempted.push_back(s);
  std::erase_if(plan.chunks, [&](const ScheduledChunk& c) { return c.seq == s; });
}

bool Scheduler::ensure_pages(Sequence* s, int32_t n_tokens, StepPlan& plan) {
  const int32_t need = pages_for(n_tokens) - static_cast<int32_t>(s->kv.blocks.size());
  while (need > kv_.pool().n_free()) {
    if (running_.empty()) return false;
    Sequence* victim = running_.back();
    preempt(victim, plan);
    if (victim == s) return false;
  }
  return kv_.reserve(s->kv, n_tokens).is_ok();
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int32_t budget = cfg_.max_num_batched_tokens;

  // 1. Decodes. Iterate over a copy: preemption edits running_.
  std::vector<Sequence*> run(running_.begin(), running_.end());
  double decode_cost = cost_.other_scale() * cost_.fixed_s;
  for (Sequence* s : run) {
    if (s->pending() != 1 || budget <= 0) continue;
    if (std::find(running_.begin(), running_.end(), s) == running_.end()) continue;  // preempted
    if (!ensure_pages(s, s->num_computed + 1, plan)) continue;
    plan.chunks.push_back({s, 1, true});
    decode_cost += cost_.chunk_cost(s->num_computed, 1) + cost_.other_scale() * cost_.per_row_s;
    ++plan.n_decodes;
    --budget;
  }
  // Prefill work allowed this step (seconds of estimated cost).
  const bool limit = plan.n_decodes > 0 && cfg_.prefill_cost_ratio > 0;
  double allowance = limit ? (cfg_.prefill_cost_ratio - 1.0) * decode_cost : 1e300;
  bool any_prefill = false;

  auto take_chunk = [&](Sequence* s) -> int32_t {
    int32_t n = std::min(s->pending(), budget);
    if (limit) {
      int32_t fit = cost_.max_chunk(s->num_computed, n, allowance);
      if (fit == 0 && !any_prefill) fit = std::min(n, 1);  // progress guarantee
      n = fit;
    }
    // Hybrid models: a chunk that would run past the divergence or the prompt checkpoint ends on
    // it, so the recurrent state there can be saved (kv/prefix_cache.h; one more step each).
    if (checkpoints_) {
      const int32_t c = prefix_->next_checkpoint(s->num_computed, s->n_prompt, s->chain);
      if (c > 0 && s->num_computed + n > c) n = c - s->num_computed;
    }
    return n;
  };

  // 2. Running sequences with pending prefill.
  run.assign(running_.begin(), running_.end());
  for (Sequence* s : run) {
    if (s->pending() <= 1 || budget <= 0) continue;
    if (std::find(running_.begin(), running_.end(), s) == running_.end()) continue;
    const int32_t n = take_chunk(s);
    if (n <= 0) break;
    if (!ensure_pages(s, s->num_computed + n, plan)) continue;
    plan.chunks.push_back({s, n, s->num_computed + n == s->n_tokens()});
    allowance -= cost_.chunk_cost(s->num_computed, n);
    budget -= n;
    any_prefill = true;
  }

  // 3. Admission, first come first served.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < cfg_.max_num_seqs) {
    if (limit && allowance <= 0 && any_prefill) break;
    Sequence* s = waiting_.front();
    if (prefix_ && s->kv.blocks.empty()) {
      s->num_computed = prefix_->match(s->tokens, s->n_tokens() - 1, s->kv, s->chain);
    }
    // Admission: the whole remaining prompt must fit in the free pages.
    const int32_t need = pages_for(s->n_tokens()) - static_cast<int32_t>(s->kv.blocks.size());
    if (need > kv_.pool().n_free()) {
      release(s);  // give matched pages back; retry next step
      break;
    }
    const int32_t n = take_chunk(s);
    if (n <= 0) { release(s); break; }
    waiting_.pop_front();
    running_.push_back(s);
    // Hybrid: the recurrent state at the end of the reused pages into the sequence's slot (cannot
    // fail either: max_num_seqs <= the pool's slots, and no checkpoint is written between match
    // and here); on failure the match is dropped and the sequence retried next step.
    if (!kv_.reserve(s->kv, s->num_computed + n).is_ok() ||
        (checkpoints_ && !prefix_->restore_state(s->kv, s->chain).is_ok())) {
      running_.pop_back();
      release(s);
      waiting_.push_front(s);
      break;
    }
    if (s->cached_tokens < 0) {  // first admission: what the prefix cache saved
      s->cached_tokens = std::min(s->num_computed, s->n_prompt);
      s->first_scheduled = std::chrono::steady_clock::now();
    }
    plan.chunks.push_back({s, n, s->num_computed + n == s->n_tokens()});
    allowance -= cost_.chunk_cost(s->num_computed, n);
    budget -= n;
    any_prefill = true;
  }
  for (const auto& c : plan.chunks) plan.n_tokens += c.n_tokens;
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  for (const auto& c : plan.chunks) {
    Sequence* s = c.seq;
    s->num_computed += c.n_tokens;
    if (!prefix_) continue;
    prefix_->register_full_pages(s->tokens, s->num_computed, s->kv, s->chain);
    if (checkpoints_) prefix_->save_state(s->num_computed, s->n_prompt, s->kv, s->chain);
  }
}

}  // namespace hs
