// kv/prefix_cache.h — reuse of full KV pages across requests with the same token prefix.
//
// A full page (P tokens) is named by a hash chain (xxHash3-64): h_i = H(tokens of page i,
// seed = h_{i-1}), so a hash names the whole prefix up to the end of its page, as vLLM's
// automatic prefix caching does. Pages are registered once they are completely computed;
// when a sequence releases them they stay in the BlockPool's free list with their content
// and their hash, and a later request whose prompt starts with the same pages takes them
// back (revive) instead of recomputing. A page's hash is dropped only when the pool hands
// it out again (eviction hook), least recently freed first. Partial pages are never
// shared, so appending to a sequence never writes into a shared page.
// Hybrid models (set_states): the full-attention layers' KV is in the pages, but the Gated-DeltaNet
// layers' state is not, so a cached run of pages is only reusable up to a page boundary whose
// recurrent state was checkpointed (kv/recurrent_pool.h). Policy (docs/hybrid-models.md):
//   - the prompt checkpoint: at the last page boundary strictly before the prompt's end,
//     b = floor((n_prompt - 1) / P) · P (the scheduler ends a prefill chunk there), kept, so the
//     same prompt again (another choice, a retry, a preempted sequence) recomputes 1..P tokens;
//   - the rolling checkpoint: at every later page boundary a step of the sequence ends on
//     (each decode step; prefill chunks when they end on one), replacing that sequence's previous
//     rolling one, so a follow-up that extends prompt + completion restores at most P - 1 + the
//     re-tokenized tail short of where the sequence stopped;
//   - the divergence checkpoint: when match() finds cached KV pages beyond the last checkpoint
//     (another conversation shares this prefix: a system prompt, tool definitions), at the end of
//     that run, split_at; the scheduler ends a prefill chunk there and it is kept, so every later
//     conversation sharing the prefix restores it. One per distinct shared prefix, made only once
//     a second conversation shows the prefix is shared.
// So a live sequence holds at most three checkpoints; finished sequences' stay until the pool's
// LRU overwrites them. match() stops at the last page with a checkpoint and restores it into the
// sequence's fresh slot. Memory: n_checkpoints × state_bytes_per_slot, fixed at start.
// Cost: one hash per full page (P tokens) and one hash-map lookup per page matched; hybrid: one
// state copy per checkpoint saved (≤ 1 per P tokens per sequence) or restored.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/recurrent_pool.h"

namespace hs {

// A sequence's running hash chain: hashes of its full pages so far.
struct PrefixChain {
  std::vector<uint64_t> page_hashes;  // [n_full_pages_hashed]
  RecurrentPool::Checkpoint rolling;  // hybrid: the rolling checkpoint this sequence saved last
  bool restore_pending = false;       // hybrid: match() reused pages up to checkpoint restore_key
  uint64_t restore_key = 0;
  int32_t split_at = 0;               // hybrid: the divergence checkpoint's position (0: none)
};

class PrefixCache {
 public:
  explicit PrefixCache(KvCache& kv);  // installs the pool's eviction hook
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Hybrid models: the pool whose checkpoints make cached pages reusable (null: plain KV models).
  void set_states(RecurrentPool* states) { states_ = states; }
  RecurrentPool* states() const { return states_; }
  // The page boundary of a prompt of n_prompt tokens where the prompt checkpoint is taken (0: none).
  int32_t prompt_checkpoint(int32_t n_prompt) const;
  // The first boundary of the policy after `from` where a prefill chunk must end (the divergence
  // or the prompt checkpoint; 0: none).
  int32_t next_checkpoint(int32_t from, int32_t n_prompt, const PrefixChain& chain) const;
  // After a step left `seq` with n_computed tokens computed (its state in its live slot is at
  // n_computed): saves a checkpoint when n_computed is a boundary of the policy above. Call after
  // register_full_pages. No-op without states.
  void save_state(int32_t n_computed, int32_t n_prompt, SeqKv& seq, PrefixChain& chain);
  // Copies the checkpoint match() chose into seq's fresh state slot (nothing when none is pending).
  // Error when no slot is free or the checkpoint is gone (the caller must then drop the match).
  Status restore_state(SeqKv& seq, PrefixChain& chain);

  // Fills an empty `seq` with the longest cached run of full pages that prefixes `tokens`,
  // using at most `max_tokens` tokens (callers pass n - 1 so one token is always computed
  // and yields logits). Retains the pages, sets seq.n_tokens and the chain. Returns the
  // number of tokens reused (a multiple of P). Hybrid: only up to the last checkpointed boundary;
  // the chain then names that checkpoint for restore_state (called once the sequence is admitted,
  // so a deferred admission copies nothing).
  int32_t match(std::span<const int32_t> tokens, int32_t max_tokens, SeqKv& seq, PrefixChain& chain);

  // Registers every page of `seq` that is now full (tokens [0, n_computed) computed) and
  // not hashed yet. `tokens` are the sequence's tokens (at least n_computed of them).
  void register_full_pages(std::span<const int32_t> tokens, int32_t n_computed, const SeqKv& seq,
                           PrefixChain& chain);

  int64_t n_cached_pages() const { return static_cast<int64_t>(by_hash_.size()); }
  // Cached pages no sequence holds (free in the pool, content kept).
  int64_t n_cached_free_pages() const;
  int64_t queries() const { return queries_; }  // tokens looked up by match()
  int64_t hits() const { return hits_; }        // of those, reused
  int64_t state_saves() const { return state_saves_; }        // checkpoints written
  int64_t state_restores() const { return state_restores_; }  // checkpoints restored by match()

  static uint64_t hash_page(std::span<const int32_t> page_tokens, uint64_t prev);

 private:
  void on_evict(int32_t block);

  KvCache& kv_;
  RecurrentPool* states_ = nullptr;
  std::unordered_map<uint64_t, int32_t> by_hash_;  // prefix hash → page id
  std::vector<uint64_t> hash_of_;                   // [n_blocks] hash of a cached page
  std::vector<uint8_t> has_hash_;                   // [n_blocks]
  int64_t queries_ = 0, hits_ = 0, state_saves_ = 0, state_restores_ = 0;
};

}  // namespace hs
