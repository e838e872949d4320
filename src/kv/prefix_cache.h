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
// Cost: one hash per full page (P tokens) and one hash-map lookup per page matched.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"

namespace hs {

// A sequence's running hash chain: hashes of its full pages so far.
struct PrefixChain {
  std::vector<uint64_t> page_hashes;  // [n_full_pages_hashed]
};

class PrefixCache {
 public:
  explicit PrefixCache(KvCache& kv);  // installs the pool's eviction hook
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Fills an empty `seq` with the longest cached run of full pages that prefixes `tokens`,
  // using at most `max_tokens` tokens (callers pass n - 1 so one token is always computed
  // and yields logits). Retains the pages, sets seq.n_tokens and the chain. Returns the
  // number of tokens reused (a multiple of P).
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

  static uint64_t hash_page(std::span<const int32_t> page_tokens, uint64_t prev);

 private:
  void on_evict(int32_t block);

  KvCache& kv_;
  std::unordered_map<uint64_t, int32_t> by_hash_;  // prefix hash → page id
  std::vector<uint64_t> hash_of_;                   // [n_blocks] hash of a cached page
  std::vector<uint8_t> has_hash_;                   // [n_blocks]
  int64_t queries_ = 0, hits_ = 0;
};

}  // namespace hs
