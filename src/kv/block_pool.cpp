// kv/block_pool.cpp — see block_pool.h.
#include "kv/block_pool.h"

#include <cassert>

namespace hs {

BlockPool::BlockPool(int32_t n_blocks) : refs_(n_blocks, 0), prev_(n_blocks, -1), next_(n_blocks, -1) {
  for (int32_t i = 0; i < n_blocks; ++i) push_back(i);
}

void BlockPool::push_back(int32_t id) {
  prev_[id] = tail_;
  next_[id] = -1;
  if (tail_ >= 0) next_[tail_] = id; else head_ = id;
  tail_ = id;
  ++n_free_;
}

void BlockPool::unlink(int32_t id) {
  if (prev_[id] >= 0) next_[prev_[id]] = next_[id]; else head_ = next_[id];
  if (next_[id] >= 0) prev_[next_[id]] = prev_[id]; else tail_ = prev_[id];
  prev_[id] = next_[id] = -1;
  --n_free_;
}

Result<int32_t> BlockPool::allocate() {
  if (head_ < 0)
    return make_error(StatusCode::kInvalidArgument, "kv: out of KV pages ({} in use)", n_blocks());
  const int32_t id = head_;
  unlink(id);
  refs_[id] = 1;
  if (on_evict_) on_evict_(id);
  return id;
}

void BlockPool::retain(int32_t id) {
  if (refs_[id] == 0) unlink(id);
  ++refs_[id];
}

void BlockPool::release(int32_t id) {
  assert(refs_[id] > 0);
  if (--refs_[id] == 0) push_back(id);
}

}  // namespace hs
