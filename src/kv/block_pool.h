// kv/block_pool.h — fixed-size KV pages handed out by id, ref-counted.
//
// The pool owns only ids and counts; the bytes live in the storage that indexes by these
// ids (kv/kv_cache.h). A page is free when its count drops to zero; free pages sit in an
// intrusive doubly linked list in the order they were freed, so allocation reuses the
// least recently freed page first — the eviction order a prefix cache wants — and a free
// page that still holds a cached prefix can be taken back out of the list (revive) in
// O(1) when a new request matches it. An eviction hook tells the prefix cache when a
// free page is handed out for new content. All operations are O(1). Not thread-safe:
// the engine thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"

namespace hs {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  Result<int32_t> allocate();           // oldest free page, ref count 1; error when none is free
  void retain(int32_t id);              // one more reference; a free page is taken off the free list
  void release(int32_t id);             // drop one reference; at zero the page joins the free list's tail
  int32_t ref_count(int32_t id) const { return refs_[id]; }

  int32_t n_blocks() const { return static_cast<int32_t>(refs_.size()); }
  int32_t n_free() const { return n_free_; }
  int32_t n_used() const { return n_blocks() - n_free(); }

  // Called with the id whenever allocate() hands out a free page (its old content dies).
  void set_evict_hook(std::function<void(int32_t)> hook) { on_evict_ = std::move(hook); }

 private:
  void unlink(int32_t id);
  void push_back(int32_t id);

  std::vector<int32_t> refs_;        // [n_blocks]
  std::vector<int32_t> prev_, next_; // [n_blocks] free-list links (-1: none)
  int32_t head_ = -1, tail_ = -1;    // oldest / newest free page
  int32_t n_free_ = 0;
  std::function<void(int32_t)> on_evict_;
};

}  // namespace hs
