// engine/engine.h — the serving engine: one thread that owns the model, the KV cache and
// the scheduler, and runs continuous batching.
//
// HTTP threads call submit() (validated RequestParams → a RequestChannel to read events
// from) and cancel(); both only touch a mutex-protected inbox. The engine thread loops:
// drain the inbox → Scheduler picks this step's tokens under the token budget (decodes
// first, then prefill chunks) → one LanguageModel::forward over all of them → sample the
// sequences whose prompt is complete → push one event per request. Requests join and
// leave every step. Stats are a snapshot copied under a mutex once per step (cheap), so
// /metrics never blocks the engine.
// Any LanguageModel (model/language_model.h): a hybrid model's states() pool caps the running
// sequences at its slots, and the prefix cache reuses its pages only up to a recurrent-state
// checkpoint (kv/prefix_cache.h); without checkpoint slots prefix caching is off for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <condition_variable>
#include <variant>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/request.h"
#include "kv/kv_cache.h"
#include "model/language_model.h"
#include "tokenizer/tokenizer.h"

namespace hs {

struct EngineConfig {
  int max_model_len = 0;               // prompt + generated tokens per request (0: model's n_ctx_train)
  int max_num_seqs = 16;               // running sequences at most
  int max_num_batched_tokens = 512;    // tokens computed per step at most (decodes + prefill chunks)
  int max_waiting = 256;               // queued requests beyond this are refused (429)
  bool enable_prefix_caching = true;
  // Fairness: while decodes run, a step's prefill work is cut so its estimated cost stays
  // within this multiple of a decode-only step (docs/serving.md). 0: token budget only.
  double prefill_cost_ratio = 2.0;
  // The machine rates of the scheduler's step-cost model (engine/step_cost.h): bytes/s and
  // FLOP/s. 0: its CPU defaults. serve sets the rates a GPU backend measured at start: with the
  // CPU's ratio of matmul to memory speed (7.5 FLOP/byte against the H200's ~190) the cost
  // limit admitted ~8 prompt tokens per decode step and queued prompts for seconds.
  double mem_bytes_per_s = 0;
  double matmul_flops_per_s = 0;
};

// Counters and gauges for /metrics and tests. Cumulative counters never decrease.
struct EngineStats {
  int running = 0;                     // sequences holding KV
  int waiting = 0;                     // admitted to the queue, not yet running
  int64_t kv_pages_total = 0;
  int64_t kv_pages_used = 0;           // referenced by a sequence
  int64_t kv_pages_cached = 0;         // free but holding a reusable prefix
  int64_t prompt_tokens_total = 0;     // prompt tokens of finished + running requests
  int64_t computed_prompt_tokens_total = 0;  // prompt tokens actually computed (not cached)
  int64_t generation_tokens_total = 0;
  int64_t prefix_cache_queries = 0;    // prompt tokens looked up
  int64_t prefix_cache_hits = 0;       // of those, found cached
  int64_t steps_total = 0;
  int64_t preemptions_total = 0;
  int64_t requests_finished[7] = {};   // indexed by EventFinish
  // Device tier of the sparse path (sparse/hot_chunks.h; all 0 without one). Counters are
  // cumulative since the tier was created.
  int64_t kv_fetch_hits = 0;           // selected non-resident chunks found in a hot slot
  int64_t kv_fetch_misses = 0;         // copied into a hot slot
  int64_t kv_fetch_bytes = 0;          // bytes those copies moved
  int64_t kv_fetch_evictions = 0;      // copies that evicted another chunk
  int64_t device_slots_total = 0;      // hot slots over every full-attention (layer, kv head)
  int64_t device_slots_used = 0;       // of those, holding a chunk
  int64_t kv_leases_live = 0;          // sequences holding a lease on copies of their KV
  // Recurrent state of hybrid models (kv/recurrent_pool.h; all 0 for other models).
  int64_t state_slots_total = 0;
  int64_t state_slots_used = 0;        // held by running sequences
  int64_t state_checkpoints_total = 0;
  int64_t state_checkpoints_used = 0;  // holding a prefix's state
  int64_t state_checkpoint_saves = 0;     // cumulative
  int64_t state_checkpoint_restores = 0;  // cumulative: follow-ups that resumed from one
};

struct SubmitError {
  enum Kind { kTooLong, kQueueFull, kInvalid, kShuttingDown } kind;
  std::string message;
};

class Engine {
 public:
  // Takes the loaded model pieces; the KV cache decides the token capacity.
  Engine(LanguageModel& model, const Tokenizer& tok, KvCache& kv, ThreadPool& pool, EngineConfig cfg);
  ~Engine();  // stops the thread; every open request gets kCancelled

  void start();
  void stop();

  const EngineConfig& config() const { return cfg_; }
  int max_model_len() const { return cfg_.max_model_len; }

  // Validates (lengths against max_model_len and KV capacity, sampling ranges) and queues.
  // On success `id` names the request for cancel().
  struct Submitted { uint64_t id; std::shared_ptr<RequestChannel> channel; };
  std::variant<Submitted, SubmitError> submit(RequestParams params);
  // Ends the request at the next step (kCancelled). Unknown or finished ids are ignored.
  void cancel(uint64_t id);

  EngineStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  EngineConfig cfg_;
};

}  // namespace hs
