// kv/kv_cache.cpp — see kv_cache.h.
#include "kv/kv_cache.h"

namespace hs {

KvCache::KvCache(const KvGeometry& g, int32_t n_blocks) : g_(g), pool_(n_blocks) {
  layer_data_.resize(g.n_layer);
  for (auto& d : layer_data_) d.assign(static_cast<size_t>(n_blocks) * g.page_floats(), 0.0f);
}

Status KvCache::reserve(SeqKv& seq, int32_t n_tokens) {
  const int32_t need = (n_tokens + g_.page_tokens - 1) / g_.page_tokens;
  while (static_cast<int32_t>(seq.blocks.size()) < need) {
    auto id = pool_.allocate();
    if (!id.is_ok()) return id.status();
    seq.blocks.push_back(*id);
  }
  return Status::ok();
}

void KvCache::release(SeqKv& seq) {
  for (int32_t id : seq.blocks) pool_.release(id);
  seq.blocks.clear();
  seq.n_tokens = 0;
}

}  // namespace hs
