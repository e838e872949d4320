// kv/block_pool.cpp — see block_pool.h.
#include "kv/block_pool.h"

#include <cassert>

namespace hs {

BlockPool::BlockPool(int32_t n_blocks) : refs_(n_blocks, 0) {
  for (int32_t i = 0; i < n_blocks; ++i) free_.push_back(i);
}

Result<int32_t> BlockPool::allocate() {
  if (free_.empty())
    return make_error(StatusCode::kInvalidArgument, "kv: out of KV pages ({} in use)", n_blocks());
  int32_t id = free_.front();
  free_.pop_front();
  refs_[id] = 1;
  return id;
}

void BlockPool::retain(int32_t id) {
  assert(refs_[id] > 0);
  ++refs_[id];
}

void BlockPool::release(int32_t id) {
  assert(refs_[id] > 0);
  if (--refs_[id] == 0) free_.push_back(id);
}

}  // namespace hs
