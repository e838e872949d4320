// kv/block_pool.h — fixed-size KV pages handed out by id, ref-counted.
//
// The pool owns only ids and counts; the bytes live in the tier that indexes by these ids
// (kv/kv_store.h). A page is free when its count drops to zero; the free list is a FIFO so
// the least recently freed page is reused first (the order a prefix cache wants for
// eviction). All operations are O(1). Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/status.h"

namespace hs {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  Result<int32_t> allocate();           // ref count 1; ResourceExhausted-style error when empty
  void retain(int32_t id);              // share a page (prefix reuse)
  void release(int32_t id);             // drop one reference; frees at zero
  int32_t ref_count(int32_t id) const { return refs_[id]; }

  int32_t n_blocks() const { return static_cast<int32_t>(refs_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_used() const { return n_blocks() - n_free(); }

 private:
  std::vector<int32_t> refs_;  // [n_blocks]
  std::deque<int32_t> free_;   // ids with refs_ == 0, oldest first
};

}  // namespace hs
