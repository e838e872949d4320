// kv/kv_cache.h — paged KV storage for every attention layer, and per-sequence block tables.
//
// Page layout (ARCHITECTURE.md): P tokens of one layer of one sequence,
//   [n_kv_heads][P][K | V][head_dim] float32,
// so one head's run of tokens is contiguous. Block ids come from one BlockPool and index
// every layer's storage alike (vLLM style): a sequence has one block table for all layers.
// Cost: memory n_layer * n_blocks * page_floats * 4 bytes, allocated up front.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"

namespace hs {

struct KvGeometry {
  int n_layer = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 16;  // P
  int64_t page_floats() const { return static_cast<int64_t>(n_kv_heads) * page_tokens * 2 * head_dim; }
};

// A sequence's view of the cache: its block table and how many tokens it holds.
struct SeqKv {
  std::vector<int32_t> blocks;  // [ceil(n_tokens / P)] page ids
  int32_t n_tokens = 0;         // tokens whose K/V are stored (positions 0..n_tokens-1)
};

class KvCache {
 public:
  KvCache(const KvGeometry& g, int32_t n_blocks);

  const KvGeometry& geometry() const { return g_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // Make room for positions [0, n_tokens) in `seq` (allocates pages as needed).
  Status reserve(SeqKv& seq, int32_t n_tokens);
  // Release every page of `seq` and reset it.
  void release(SeqKv& seq);

  // Pointer to K (V = K + head_dim) of (layer, kv head, position) in seq's pages.
  float* k_at(const SeqKv& seq, int layer, int head, int32_t pos) {
    const int P = g_.page_tokens;
    float* page = layer_data_[layer].data() + static_cast<int64_t>(seq.blocks[pos / P]) * g_.page_floats();
    return page + (static_cast<int64_t>(head) * P + pos % P) * 2 * g_.head_dim;
  }
  const float* k_at(const SeqKv& seq, int layer, int head, int32_t pos) const {
    return const_cast<KvCache*>(this)->k_at(seq, layer, head, pos);
  }
  // Start of layer `layer`'s storage: page b is at layer_base(layer) + b * page_floats().
  const float* layer_base(int layer) const { return layer_data_[layer].data(); }
  // Whole storage of one layer (benchmarks fill it with synthetic context).
  std::vector<float>& layer_storage(int layer) { return layer_data_[layer]; }

 private:
  KvGeometry g_;
  BlockPool pool_;
  std::vector<std::vector<float>> layer_data_;  // [n_layer][n_blocks * page_floats]
};

}  // namespace hs
