// kv/prefix_cache.cpp — see prefix_cache.h.
#include "kv/prefix_cache.h"

#include <xxhash.h>

namespace hs {

PrefixCache::PrefixCache(KvCache& kv)
    : kv_(kv), hash_of_(kv.pool().n_blocks(), 0), has_hash_(kv.pool().n_blocks(), 0) {
  kv_.pool().set_evict_hook([this](int32_t b) { on_evict(b); });
}

PrefixCache::~PrefixCache() { kv_.pool().set_evict_hook({}); }

uint64_t PrefixCache::hash_page(std::span<const int32_t> page_tokens, uint64_t prev) {
  return XXH3_64bits_withSeed(page_tokens.data(), page_tokens.size_bytes(), prev);
}

void PrefixCache::on_evict(int32_t block) {
  if (!has_hash_[block]) return;
  auto it = by_hash_.find(hash_of_[block]);
  if (it != by_hash_.end() && it->second == block) by_hash_.erase(it);
  has_hash_[block] = 0;
}

int32_t PrefixCache::match(std::span<const int32_t> tokens, int32_t max_tokens, SeqKv& seq,
                           PrefixChain& chain) {
  const int P = kv_.geometry().page_tokens;
  queries_ += static_cast<int64_t>(tokens.size());
  // The run of cached pages; hybrid: cut back to its last checkpointed boundary.
  std::vector<std::pair<uint64_t, int32_t>> run;  // (hash, page)
  size_t usable = 0;
  uint64_t prev = 0;
  int32_t n = 0;
  while (n + P <= max_tokens && n + P <= static_cast<int32_t>(tokens.size())) {
    const uint64_t h = hash_page(tokens.subspan(n, P), prev);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    run.emplace_back(h, it->second);
    if (!states_ || states_->has(h)) usable = run.size();
    prev = h;
    n += P;
  }
  if (states_ && usable > 0) {
    chain.restore_pending = true;
    chain.restore_key = run[usable - 1].first;
  }
  chain.split_at = states_ && run.size() > usable ? static_cast<int32_t>(run.size()) * P : 0;
  for (size_t i = 0; i < usable; ++i) {
    kv_.pool().retain(run[i].second);
    seq.blocks.push_back(run[i].second);
    chain.page_hashes.push_back(run[i].first);
  }
  n = static_cast<int32_t>(usable) * P;
  seq.n_tokens = n;
  hits_ += n;
  return n;
}

Status PrefixCache::restore_state(SeqKv& seq, PrefixChain& chain) {
  if (!chain.restore_pending) return Status::ok();
  chain.restore_pending = false;
  if (!states_) return make_error(StatusCode::kInvalidArgument, "prefix cache: a state restore without a state pool");
  HS_RETURN_IF_ERROR(states_->restore(chain.restore_key, seq));
  ++state_restores_;
  return Status::ok();
}

int32_t PrefixCache::prompt_checkpoint(int32_t n_prompt) const {
  const int P = kv_.geometry().page_tokens;
  return n_prompt > 1 ? (n_prompt - 1) / P * P : 0;
}

int32_t PrefixCache::next_checkpoint(int32_t from, int32_t n_prompt, const PrefixChain& chain) const {
  const int32_t b = prompt_checkpoint(n_prompt);
  int32_t next = 0;
  for (int32_t c : {chain.split_at, b})
    if (c > from && (next == 0 || c < next)) next = c;
  return next;
}

void PrefixCache::save_state(int32_t n_computed, int32_t n_prompt, SeqKv& seq, PrefixChain& chain) {
  if (!states_ || states_->n_checkpoints() == 0) return;
  const int P = kv_.geometry().page_tokens;
  if (n_computed <= 0 || n_computed % P != 0) return;
  const int32_t b = prompt_checkpoint(n_prompt);
  const bool kept = n_computed == b || n_computed == chain.split_at;  // prompt or divergence checkpoint
  if (n_computed < b && !kept) return;  // inside the prompt: only the divergence checkpoint
  const size_t page = static_cast<size_t>(n_computed / P);
  if (chain.page_hashes.size() < page) return;  // not registered (cannot happen after register_full_pages)
  const uint64_t h = chain.page_hashes[page - 1];
  bool saved = false;
  // The divergence checkpoint ends a prefix another conversation shares: kept over the others.
  auto c = states_->save(seq, h, &saved, /*shared=*/n_computed == chain.split_at);
  if (!c.is_ok() || !saved) return;  // already checkpointed (by another sequence, or restored from)
  ++state_saves_;
  if (kept) return;
  if (chain.rolling.valid()) states_->drop(chain.rolling);
  chain.rolling = *c;
}

void PrefixCache::register_full_pages(std::span<const int32_t> tokens, int32_t n_computed,
                                      const SeqKv& seq, PrefixChain& chain) {
  const int P = kv_.geometry().page_tokens;
  const size_t full = static_cast<size_t>(n_computed / P);
  while (chain.page_hashes.size() < full) {
    const size_t i = chain.page_hashes.size();
    const uint64_t prev = i ? chain.page_hashes.back() : 0;
    const uint64_t h = hash_page(tokens.subspan(i * P, P), prev);
    chain.page_hashes.push_back(h);
    const int32_t block = seq.blocks[i];
    if (has_hash_[block]) continue;             // already a cached page (matched)
    if (by_hash_.count(h)) continue;            // same prefix computed by another sequence
    by_hash_.emplace(h, block);
    hash_of_[block] = h;
    has_hash_[block] = 1;
  }
}

int64_t PrefixCache::n_cached_free_pages() const {
  int64_t n = 0;
  for (const auto& [h, b] : by_hash_) n += kv_.pool().ref_count(b) == 0;
  return n;
}

}  // namespace hs
