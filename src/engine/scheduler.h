// engine/scheduler.h — decides, every step, which tokens of which sequences are computed.
//
// One rule (vLLM v1): each sequence's num_computed catches up to its token count, under a
// per-step token budget (max_num_batched_tokens). Order within a step:
//   1. running sequences with one pending token (decodes), oldest first — always scheduled;
//   2. running sequences still prefilling, oldest first — chunked to the remaining budget
//      and, while decodes run, to a cost allowance (StepCostModel): a step's prefill work may
//      cost at most (prefill_cost_ratio - 1) x the decode-only step, so a 16K-token prompt
//      is spread over many steps instead of stalling the streams (at least one token per
//      step, so every prompt progresses);
//   3. waiting sequences, first come first served, while there are free sequence slots
//      (max_num_seqs), budget, and free KV pages for their whole remaining prompt
//      (admission); the prefix cache is consulted first.
// When a running sequence needs a page and none is free, the most recently admitted
// sequence is preempted (its pages released, back to the front of the queue).
// Hybrid models: every running sequence holds a recurrent-state slot (the engine caps
// max_num_seqs at the pool's slots); releasing its KV (finish, cancel, preemption) frees the
// slot through its lease. With state checkpoints in the prefix cache, a prefill chunk that would
// cross the prompt checkpoint ends on it, and commit() saves the checkpoints of the policy.
// Cost: O(running + admitted) per step. Engine thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_cost.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"

namespace hs {

struct SchedulerConfig {
  int max_num_seqs = 16;
  int max_num_batched_tokens = 512;
  double prefill_cost_ratio = 2.0;  // 0: no cost limit
};

struct ScheduledChunk {
  Sequence* seq;
  int32_t n_tokens;  // computes tokens [num_computed, num_computed + n_tokens)
  bool sample;       // the chunk ends at the last token: sample the next one
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<Sequence*> preempted;  // sent back to the queue this step
  int32_t n_tokens = 0;
  int32_t n_decodes = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(KvCache& kv, PrefixCache* prefix, SchedulerConfig cfg, StepCostModel cost);

  void add(Sequence* s);     // joins the queue's tail
  // Removes a sequence wherever it is and releases its KV pages.
  void remove(Sequence* s);

  StepPlan schedule();
  // After the step ran: num_computed advanced by the plan; registers full pages.
  void commit(const StepPlan& plan);

  const std::deque<Sequence*>& running() const { return running_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  // The step cost model (the engine feeds it measured step times).
  StepCostModel& cost() { return cost_; }

 private:
  int32_t pages_for(int32_t n_tokens) const;
  bool ensure_pages(Sequence* s, int32_t n_tokens, StepPlan& plan);  // may preempt newer sequences
  void preempt(Sequence* s, StepPlan& plan);
  void release(Sequence* s);

  KvCache& kv_;
  PrefixCache* prefix_;
  SchedulerConfig cfg_;
  StepCostModel cost_;
  bool checkpoints_ = false;       // prefix cache with recurrent-state checkpoints
  std::deque<Sequence*> running_;  // admission order, oldest first
  std::deque<Sequence*> waiting_;
};

}  // namespace hs
