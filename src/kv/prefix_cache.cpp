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
  uint64_t prev = 0;
  int32_t n = 0;
  while (n + P <= max_tokens && n + P <= static_cast<int32_t>(tokens.size())) {
    const uint64_t h = hash_page(tokens.subspan(n, P), prev);
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    kv_.pool().retain(it->second);
    seq.blocks.push_back(it->second);
    chain.page_hashes.push_back(h);
    prev = h;
    n += P;
  }
  seq.n_tokens = n;
  hits_ += n;
  return n;
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
