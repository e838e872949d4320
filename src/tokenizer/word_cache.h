// tokenizer/word_cache.h — a thread-safe cache from a pre-token's bytes to its token ids.
//
// BPE on a word is the expensive step and natural text repeats words constantly, so results
// are cached as HF's BPE model does. Sixteen shards, each a mutex and a hash map, keep
// contention low when several HTTP threads tokenize at once. A shard that reaches its limit is
// cleared (cheap and good enough: hot words come back at once). Only short words are cached.
// Cost: one hash + one lock per lookup; memory bounded by kShards * max_per_shard entries.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hs::tok {

class WordCache {
 public:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxWordBytes = 128;

  explicit WordCache(size_t max_per_shard = 4096) : max_per_shard_(max_per_shard) {}

  static bool cacheable(std::string_view word) { return word.size() <= kMaxWordBytes; }

  // Append the cached ids of `word` to out; false if absent.
  bool lookup(std::string_view word, std::vector<int32_t>& out) const {
    Shard& s = shard(word);
    std::lock_guard<std::mutex> lock(s.mu);
    const auto it = s.map.find(word);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view word, const int32_t* ids, size_t n) const {
    Shard& s = shard(word);
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.map.size() >= max_per_shard_) s.map.clear();
    s.map.emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  Shard& shard(std::string_view word) const {
    return shards_[std::hash<std::string_view>()(word) % kShards];
  }

  size_t max_per_shard_;
  mutable Shard shards_[kShards];
};

}  // namespace hs::tok
