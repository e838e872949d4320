// engine/engine.cpp — see engine.h.
#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>

#include "engine/logprobs.h"
#include "engine/scheduler.h"
#include "kv/prefix_cache.h"
#include "kv/recurrent_pool.h"
#include "sparse/hot_chunks.h"

namespace hs {

const char* event_finish_name(EventFinish f) {
  switch (f) {
    case EventFinish::kNone: return "none";
    case EventFinish::kLength: return "length";
    case EventFinish::kStop: return "stop";
    case EventFinish::kEos: return "stop";
    case EventFinish::kCancelled: return "abort";
    case EventFinish::kTimeout: return "abort";
    case EventFinish::kError: return "error";
  }
  return "?";
}

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

struct Engine::Impl {
  LanguageModel& model;
  const Tokenizer& tok;
  KvCache& kv;
  ThreadPool& pool;
  EngineConfig cfg;
  std::unique_ptr<PrefixCache> prefix;
  std::unique_ptr<Scheduler> sched;

  // Inbox: HTTP threads → engine thread.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Sequence>> inbox;
  std::vector<uint64_t> cancels;
  bool stopping = false;
  std::atomic<uint64_t> next_id{1};
  std::atomic<int> n_waiting{0};  // queued in the scheduler (last step) — for the 429 check

  // Engine thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> live;
  // What sampling one logits row gave (computed on the pool's threads; delivered serially).
  struct SampledRow {
    Sequence* seq = nullptr;
    int32_t token = -1;
    TokenLogprob logprob;  // when the request asked for logprobs
  };

  std::vector<std::vector<float>> raw;  // [pool threads][n_vocab]: a row before sampling, for logprobs
  std::vector<SampledRow> sampled;      // [rows sampled this step]
  EngineStats counters;       // cumulative fields, engine-thread copy

  mutable std::mutex stats_mu;
  EngineStats published;
  std::thread thread;

  Impl(LanguageModel& m, const Tokenizer& t, KvCache& k, ThreadPool& p, const EngineConfig& c)
      : model(m), tok(t), kv(k), pool(p), cfg(c) {
    if (cfg.enable_prefix_caching) {
      prefix = std::make_unique<PrefixCache>(kv);
      prefix->set_states(model.states());
    }
    SchedulerConfig sc{cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.prefill_cost_ratio};
    sched = std::make_unique<Scheduler>(
        kv, prefix.get(), sc,
        cfg.mem_bytes_per_s > 0 && cfg.matmul_flops_per_s > 0
            ? StepCostModel::from_config(m.config(), m.weight_bytes(),
                                         static_cast<double>(kv_token_bytes(kv.geometry().dtype, m.config().head_dim)),
                                         cfg.mem_bytes_per_s, cfg.matmul_flops_per_s)
            : StepCostModel::from_config(m.config(), m.weight_bytes(),
                                         static_cast<double>(kv_token_bytes(kv.geometry().dtype, m.config().head_dim))));
    publish();
  }

  void publish() {
    EngineStats s = counters;
    s.running = static_cast<int>(sched->running().size());
    s.waiting = static_cast<int>(sched->waiting().size());
    s.kv_pages_total = kv.pool().n_blocks();
    s.kv_pages_used = kv.pool().n_used();
    s.kv_pages_cached = prefix ? prefix->n_cached_free_pages() : 0;
    s.prefix_cache_queries = prefix ? prefix->queries() : 0;
    s.prefix_cache_hits = prefix ? prefix->hits() : 0;
    if (const HotChunks* hot = model.hot_chunks()) {
      const HotChunkStats& f = hot->total();
      s.kv_fetch_hits = f.hits;
      s.kv_fetch_misses = f.misses;
      s.kv_fetch_bytes = f.bytes_moved;
      s.kv_fetch_evictions = f.evictions;
      s.device_slots_total = hot->slots_total();
      s.device_slots_used = hot->slots_used();
    }
    s.kv_leases_live = kv.leases().n_live();
    if (const RecurrentPool* st = model.states()) {
      s.state_slots_total = st->n_slots();
      s.state_slots_used = st->n_used();
      s.state_checkpoints_total = st->n_checkpoints();
      s.state_checkpoints_used = st->n_checkpoints_used();
    }
    s.state_checkpoint_saves = prefix ? prefix->state_saves() : 0;
    s.state_checkpoint_restores = prefix ? prefix->state_restores() : 0;
    n_waiting.store(s.waiting);
    std::lock_guard lk(stats_mu);
    published = s;
  }

  // Sends the final event (ev.finish set; tokens/text of this step may ride along), releases
  // every page and slot of the request and forgets it: sched->remove → KvCache::release ends
  // the sequence's lease, which frees its hot chunk slots (preemption goes the same way).
  void finish(Sequence* s, RequestEvent ev) {
    ev.time = Clock::now();
    ev.usage.prompt_tokens = s->n_prompt;
    ev.usage.completion_tokens = s->n_generated() + (ev.finish == EventFinish::kEos ? 1 : 0);
    ev.usage.cached_tokens = std::max(0, s->cached_tokens);
    ev.n_preemptions = s->n_preemptions;
    ev.first_scheduled = s->first_scheduled;
    counters.requests_finished[static_cast<int>(ev.finish)]++;
    counters.prompt_tokens_total += s->n_prompt;
    counters.preemptions_total += s->n_preemptions;
    s->channel->push(std::move(ev));
    sched->remove(s);
    live.erase(s->id);  // destroys s
  }
  void finish(Sequence* s, EventFinish why, std::string text = {}, std::string error = {}) {
    RequestEvent ev;
    ev.finish = why;
    ev.text = std::move(text);
    ev.error = std::move(error);
    finish(s, std::move(ev));
  }

  // Samples every row of `logits` [rows.size()][n_vocab] in parallel (each sequence's sampler
  // is its own; a row is changed in place), then hands each token to its request in order.
  void sample_rows(std::span<Sequence* const> rows, std::span<float> logits) {
    const int V = model.config().n_vocab;
    sampled.resize(rows.size());
    raw.resize(static_cast<size_t>(pool.n_threads()));
    pool.parallel_for(static_cast<int64_t>(rows.size()), 1, [&](int64_t b, int64_t e, int thread) {
      for (int64_t i = b; i < e; ++i) {
        Sequence* s = rows[i];
        float* row = logits.data() + i * V;
        const int k = s->params.logprobs;
        if (k >= 0) raw[thread].assign(row, row + V);  // logprobs of the model, before any mask
        if (s->constraint) s->constraint->mask(std::span<float>(row, V));
        SampledRow& out = sampled[i];
        out.seq = s;
        out.token = s->sampler->sample(std::span<float>(row, V));
        if (k >= 0) out.logprob = compute_logprobs(raw[thread], out.token, k);
      }
    });
    for (size_t i = 0; i < rows.size(); ++i) deliver(sampled[i]);
  }

  void deliver(SampledRow& r) {
    Sequence* s = r.seq;
    const int k = s->params.logprobs;
    const int32_t t = r.token;
    counters.generation_tokens_total++;
    if (s->constraint && !s->constraint->accept(t)) {
      finish(s, EventFinish::kError, s->text->finish(),
             fmt::format("the grammar rejected token {} it had allowed (a grammar engine fault)", t));
      return;
    }
    if (!s->params.ignore_eos && tok.is_eog(t)) {
      finish(s, EventFinish::kEos, s->text->finish());
      return;
    }
    RequestEvent ev;
    ev.time = Clock::now();
    s->tokens.push_back(t);
    s->sampler->accept(t);
    ev.tokens.push_back(t);
    if (k >= 0) ev.logprobs.push_back(std::move(r.logprob));
    ev.text = s->text->push(t);
    if (s->text->stopped()) {
      ev.finish = EventFinish::kStop;
      ev.stop = std::string(s->text->matched_stop());
    } else if (s->n_generated() >= s->params.max_tokens || s->n_tokens() >= cfg.max_model_len) {
      ev.finish = EventFinish::kLength;
      ev.text += s->text->finish();
    }
    if (ev.finish == EventFinish::kNone) {
      s->channel->push(std::move(ev));
      return;
    }
    finish(s, std::move(ev));  // final event: carries this token and the usage
  }

  void step(const StepPlan& plan) {
    Batch batch;
    std::vector<SeqKv*> seqs;  // [n_chunks]
    for (size_t i = 0; i < plan.chunks.size(); ++i) {
      const ScheduledChunk& c = plan.chunks[i];
      seqs.push_back(&c.seq->kv);
      const int32_t end = c.seq->num_computed + c.n_tokens;
      for (int32_t p = c.seq->num_computed; p < end; ++p)
        batch.add(c.seq->tokens[p], p, static_cast<int32_t>(i), c.sample && p == end - 1);
      if (c.n_tokens > 1 || !c.sample) counters.computed_prompt_tokens_total += c.n_tokens;
    }
    // Predicted cost parts of this step (before commit moves num_computed), for calibration.
    StepCostModel& cm = sched->cost();
    double other = cm.fixed_s, attn = 0;
    for (const auto& c : plan.chunks) {
      other += cm.chunk_other(c.n_tokens) + (c.sample ? cm.per_row_s : 0);
      attn += cm.chunk_attn(c.seq->num_computed, c.n_tokens);
    }
    const auto t0 = Clock::now();
    Result<std::span<float>> logits = model.forward(batch, seqs, kv, pool);  // [n_sampled][n_vocab]
    const Status& st = logits.status();
    cm.observe(other, attn, std::chrono::duration<double>(Clock::now() - t0).count());
    counters.steps_total++;
    if (counters.steps_total % 500 == 0)
      spdlog::debug("engine: step {} ({} tokens, {} decodes); cost scales: matmul {:.2f}, attention {:.2f}",
                    counters.steps_total, plan.n_tokens, plan.n_decodes, cm.other_scale(), cm.attn_scale());
    if (!st.is_ok()) {
      spdlog::error("engine: forward failed: {}", st.message());
      for (const auto& c : plan.chunks) finish(c.seq, EventFinish::kError, {}, st.message());
      return;
    }
    sched->commit(plan);
    std::vector<Sequence*> rows;  // [logit rows]: the sequences sampled this step, in batch order
    for (const auto& c : plan.chunks)
      if (c.sample) rows.push_back(c.seq);
    sample_rows(rows, *logits);
  }

  void loop() {
    for (;;) {
      std::vector<std::unique_ptr<Sequence>> incoming;
      std::vector<uint64_t> cancelled;
      {
        std::unique_lock lk(mu);
        if (sched->idle() && inbox.empty() && cancels.empty() && !stopping)
          cv.wait_for(lk, std::chrono::milliseconds(100));
        if (stopping) break;
        incoming.swap(inbox);
        cancelled.swap(cancels);
      }
      for (auto& s : incoming) {
        sched->add(s.get());
        const uint64_t id = s->id;
        live.emplace(id, std::move(s));
      }
      for (uint64_t id : cancelled)
        if (auto it = live.find(id); it != live.end()) finish(it->second.get(), EventFinish::kCancelled);
      const auto now = Clock::now();
      std::vector<Sequence*> expired;
      for (auto& [id, s] : live)
        if (s->deadline < now) expired.push_back(s.get());
      for (Sequence* s : expired) finish(s, EventFinish::kTimeout);

      if (!sched->idle()) {
        StepPlan plan = sched->schedule();
        if (!plan.empty()) {
          step(plan);
        } else if (sched->running().empty() && !sched->waiting().empty()) {
          // Nothing runs and the head of the queue cannot be admitted: it can never fit.
          finish(sched->waiting().front(), EventFinish::kError, {}, "request does not fit in the KV cache");
        }
      }
      publish();
    }
    {
      std::lock_guard lk(mu);
      for (auto& s : inbox) {
        sched->add(s.get());
        const uint64_t id = s->id;
        live.emplace(id, std::move(s));
      }
      inbox.clear();
    }
    std::vector<Sequence*> all;
    for (auto& [id, s] : live) all.push_back(s.get());
    for (Sequence* s : all) finish(s, EventFinish::kCancelled);
    publish();
  }
};

Engine::Engine(LanguageModel& model, const Tokenizer& tok, KvCache& kv, ThreadPool& pool, EngineConfig cfg)
    : cfg_(cfg) {
  const int64_t capacity = static_cast<int64_t>(kv.pool().n_blocks()) * kv.geometry().page_tokens;
  if (cfg_.max_model_len <= 0) cfg_.max_model_len = model.config().n_ctx_train;
  cfg_.max_model_len = static_cast<int>(std::min<int64_t>(cfg_.max_model_len, capacity));
  cfg_.max_num_seqs = std::max(1, cfg_.max_num_seqs);
  if (const RecurrentPool* st = model.states()) {  // every running sequence holds a state slot
    if (cfg_.max_num_seqs > st->n_slots())
      spdlog::info("engine: max_num_seqs {} -> {} (the recurrent-state slots)", cfg_.max_num_seqs, st->n_slots());
    cfg_.max_num_seqs = std::max(1, std::min(cfg_.max_num_seqs, st->n_slots()));
    if (cfg_.enable_prefix_caching && st->n_checkpoints() == 0) {
      // A hybrid model's cached pages are useless without its recurrent state at their end.
      spdlog::info("prefix caching: off (a hybrid model without recurrent-state checkpoint slots)");
      cfg_.enable_prefix_caching = false;
    }
  }
  cfg_.max_num_batched_tokens = std::max(1, cfg_.max_num_batched_tokens);
  impl_ = std::make_unique<Impl>(model, tok, kv, pool, cfg_);
}

Engine::~Engine() { stop(); }

void Engine::start() {
  if (impl_->thread.joinable()) return;
  impl_->thread = std::thread([this] { impl_->loop(); });
}

void Engine::stop() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::variant<Engine::Submitted, SubmitError> Engine::submit(RequestParams params) {
  const int n_vocab = impl_->model.config().n_vocab;
  if (params.prompt.empty()) return SubmitError{SubmitError::kInvalid, "the prompt is empty"};
  for (int32_t t : params.prompt)
    if (t < 0 || t >= n_vocab)
      return SubmitError{SubmitError::kInvalid, fmt::format("token id {} is out of range [0, {})", t, n_vocab)};
  for (const auto& [t, b] : params.sampling.logit_bias)
    if (t < 0 || t >= n_vocab)
      return SubmitError{SubmitError::kInvalid, fmt::format("logit_bias: token id {} is out of range [0, {})", t, n_vocab)};
  if (params.max_tokens < 1)
    return SubmitError{SubmitError::kInvalid, fmt::format("max_tokens must be at least 1, got {}", params.max_tokens)};
  const int64_t total = static_cast<int64_t>(params.prompt.size()) + params.max_tokens;
  if (total > cfg_.max_model_len)
    return SubmitError{SubmitError::kTooLong,
                       fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                   "tokens ({} in the prompt, {} in the completion). Please reduce the length of "
                                   "the prompt or the completion.",
                                   cfg_.max_model_len, total, params.prompt.size(), params.max_tokens)};
  if (Status st = params.sampling.validate(); !st.is_ok())
    return SubmitError{SubmitError::kInvalid, std::string(st.message())};
  if (params.logprobs > 20)
    return SubmitError{SubmitError::kInvalid, fmt::format("logprobs must be at most 20, got {}", params.logprobs)};

  auto s = std::make_unique<Sequence>();
  s->id = impl_->next_id.fetch_add(1);
  s->channel = std::make_shared<RequestChannel>();
  s->tokens = params.prompt;
  s->n_prompt = static_cast<int32_t>(params.prompt.size());
  s->arrival = Clock::now();
  if (params.timeout_s > 0)
    s->deadline = s->arrival + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(params.timeout_s));
  s->sampler = std::make_unique<Sampler>(params.sampling);
  for (int32_t t : params.prompt) s->sampler->accept(t);
  if (params.grammar) {
    if (params.ignore_eos)
      return SubmitError{SubmitError::kInvalid, "ignore_eos cannot be combined with a grammar (it ends the output)"};
    s->constraint = params.grammar->start();
  }
  s->text = std::make_unique<OutputText>(impl_->tok, params.stop);
  s->params = std::move(params);
  Submitted out{s->id, s->channel};
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->stopping) return SubmitError{SubmitError::kShuttingDown, "the server is shutting down"};
    const int queued = impl_->n_waiting.load() + static_cast<int>(impl_->inbox.size());
    if (queued >= cfg_.max_waiting)
      return SubmitError{SubmitError::kQueueFull,
                         fmt::format("the server is busy: {} requests are waiting; retry later", queued)};
    impl_->inbox.push_back(std::move(s));
  }
  impl_->cv.notify_one();
  return out;
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard lk(impl_->mu);
    impl_->cancels.push_back(id);
  }
  impl_->cv.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard lk(impl_->stats_mu);
  EngineStats s = impl_->published;
  return s;
}

}  // namespace hs
