// kv/kv_cache.h — paged KV storage for every attention layer, and per-sequence block tables.
//
// Page layout (ARCHITECTURE.md): P tokens of one layer of one sequence,
//   [n_kv_heads][P][K | V][head_dim] elements of the cache dtype (f32 or f16),
// so one head's run of tokens is contiguous. Block ids come from one BlockPool and index
// every layer's storage alike (vLLM style): a sequence has one block table for all layers.
// Cost: memory n_layer * n_blocks * page_elems * elem_bytes, allocated up front; f16 halves
// the bytes every decode step reads at long context.
#pragma once

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"

namespace hs {

enum class KvDtype : uint8_t { kF32, kF16 };
const char* kv_dtype_name(KvDtype t);
Result<KvDtype> parse_kv_dtype(std::string_view name);  // "f32" | "f16"
inline int kv_elem_bytes(KvDtype t) { return t == KvDtype::kF32 ? 4 : 2; }
// What the CLI uses unless told otherwise (llama.cpp's default too): half the bytes of f32
// per decode step; the golden tests run with it.
inline constexpr KvDtype kDefaultKvDtype = KvDtype::kF16;

struct KvGeometry {
  int n_layer = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 16;  // P
  KvDtype dtype = KvDtype::kF32;
  int64_t page_elems() const { return static_cast<int64_t>(n_kv_heads) * page_tokens * 2 * head_dim; }
  int64_t page_bytes() const { return page_elems() * kv_elem_bytes(dtype); }
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

  // Store K and V ([head_dim] floats each) of (layer, kv head, position), converting to the
  // cache dtype. The position's page must be reserved.
  void write(const SeqKv& seq, int layer, int head, int32_t pos, const float* k, const float* v);
  // Read back K and V as floats (tests, debugging).
  void read(const SeqKv& seq, int layer, int head, int32_t pos, float* k, float* v) const;
  // Address of K of (layer, head, pos); V follows head_dim elements later.
  const void* row(const SeqKv& seq, int layer, int head, int32_t pos) const;

  // Start of layer `layer`'s storage: page b starts b * page_bytes() later.
  const void* layer_base(int layer) const { return layer_data_[layer].data(); }
  // Fill every page with N(0, 1) values (benchmarks: synthetic context).
  void fill_random(std::mt19937& rng);

 private:
  uint8_t* row_ptr(const SeqKv& seq, int layer, int head, int32_t pos) const;

  KvGeometry g_;
  BlockPool pool_;
  std::vector<std::vector<uint8_t>> layer_data_;  // [n_layer][n_blocks * page_bytes]
};

}  // namespace hs
