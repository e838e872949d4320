// kv/tier/hot_set.h — the residency map and LRU of one (layer, kv head)'s hot chunk slots.
//
// Pure bookkeeping (the bytes live in the device tier): which (lease id, generation,
// chunk) occupies which slot, which slots are free, pinned, or evictable in LRU order.
//   - residency map: HotKey → slot, an open-addressing table (linear probing, backward-shift
//     erase, at most half full, keys inline: one cache line per lookup), O(1) expected;
//   - LRU: an intrusive doubly-linked list over slot indices holding exactly the resident,
//     unpinned slots (head = least recently used), O(1) touch / evict;
//   - pins: a pinned slot (selected for the current step) is off the LRU list and cannot be
//     evicted; when its pin count returns to zero it re-enters as most recently used;
//   - per-owner lists (intrusive, by lease id) so a finished or cancelled sequence frees
//     its slots in O(its slots);
//   - every slot has an epoch, bumped each time it changes owner or is freed, so a copy
//     planned against a slot can tell whether the slot still belongs to its key.
// Free slots are reused LIFO. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace hs {

struct HotKey {
  uint32_t lease_id = 0;
  uint32_t generation = 0;
  int32_t chunk = 0;
  friend bool operator==(const HotKey&, const HotKey&) = default;
};

struct HotKeyHash {
  size_t operator()(const HotKey& k) const {
    uint64_t x = (static_cast<uint64_t>(k.lease_id) << 32 | k.generation) * 0x9e3779b97f4a7c15ull;
    x ^= static_cast<uint32_t>(k.chunk) * 0xc2b2ae3d27d4eb4full;
    return static_cast<size_t>(x ^ (x >> 29));
  }
};

class HotSet {
 public:
  HotSet(int32_t n_slots, int32_t max_owners);

  struct Acquired {
    int32_t slot = -1;    // -1: no slot (every slot is pinned)
    bool hit = false;     // key was already resident
    bool evicted = false; // a resident key was evicted to make room
    HotKey evicted_key{};
  };

  // Slot holding `key`, or -1.
  int32_t find(const HotKey& key) const;
  // Hit: the slot becomes most recently used (if unpinned). Miss: takes a free slot, else
  // evicts the least recently used unpinned slot; the new slot is resident and unpinned.
  Acquired acquire(const HotKey& key);
  void pin(int32_t slot);
  void unpin(int32_t slot);
  // Frees every slot owned by lease id `owner` (any generation, pinned or not).
  int32_t release_owner(uint32_t owner);

  int32_t n_slots() const { return static_cast<int32_t>(keys_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_resident() const { return n_slots() - n_free(); }
  int32_t n_pinned() const { return n_pinned_; }
  int32_t n_evictable() const { return n_resident() - n_pinned_; }  // resident and unpinned
  bool resident(int32_t slot) const { return resident_[slot] != 0; }
  const HotKey& key(int32_t slot) const { return keys_[slot]; }
  uint32_t epoch(int32_t slot) const { return epoch_[slot]; }
  int32_t pins(int32_t slot) const { return pins_[slot]; }
  int32_t lru_slot() const { return next_[sentinel()] == sentinel() ? -1 : next_[sentinel()]; }

  // Checks every internal link and count (tests; O(n_slots)).
  Status check() const;

 private:
  int32_t sentinel() const { return n_slots(); }
  void lru_push_mru(int32_t s);
  void lru_remove(int32_t s);
  void owner_push(int32_t s);
  void owner_remove(int32_t s);
  void free_slot(int32_t s);

  std::vector<HotKey> keys_;       // [n_slots] owner key of a resident slot
  std::vector<uint32_t> epoch_;    // [n_slots] bumped on every owner change / free
  std::vector<int32_t> pins_;      // [n_slots] pin count
  std::vector<uint8_t> resident_;  // [n_slots]
  std::vector<int32_t> prev_;      // [n_slots + 1] LRU links; index n_slots is the sentinel
  std::vector<int32_t> next_;      // [n_slots + 1]
  std::vector<int32_t> oprev_;     // [n_slots] owner-list links (-1 ends)
  std::vector<int32_t> onext_;     // [n_slots]
  std::vector<int32_t> owner_head_;  // [max_owners] first slot of each lease id (-1 none)
  std::vector<int32_t> free_;      // free slots, LIFO
  // Residency map HotKey → slot: open addressing, capacity a power of two ≥ 2 · n_slots.
  class SlotTable {
   public:
    explicit SlotTable(int32_t n_slots);
    int32_t find(const HotKey& k) const;       // slot or -1
    void insert(const HotKey& k, int32_t slot);  // k must be absent
    void erase(const HotKey& k);                 // k must be present
    int32_t size() const { return size_; }

   private:
    struct Entry {
      HotKey key;
      int32_t slot = -1;  // -1: empty
    };
    size_t home(const HotKey& k) const { return HotKeyHash{}(k) & mask_; }
    std::vector<Entry> e_;
    size_t mask_ = 0;
    int32_t size_ = 0;
  };
  SlotTable map_;
  int32_t n_pinned_ = 0;
};

}  // namespace hs
