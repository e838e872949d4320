// sparse/chunk_value_means.h — the mean value vector of every chunk, for the estimated tail.
//
// Sparse attention reads the selected chunks exactly; what it leaves out is, in diffuse heads,
// a broad smear of small weights (Gemma 3 270M's layer 11 at 32K: the best 2048-token
// selection holds only ~0.73 of the softmax mass). Dropping it renormalises the selected part
// and changes the output. The estimated tail (SparseConfig::tail_estimate, docs/sparse-attention.md)
// adds it back as one more attention partial: per unselected chunk c and query head g, the
// sketch's log mass L_gc (the group-mass selector computes it anyway) times the chunk's mean
// value v̄_c. This store keeps v̄_c: per layer, page b holds [n_kv_heads][P / C][head_dim]
// float32, parallel to the KV pages (same block ids), updated as values are appended (a
// running mean; the chunk's first position resets it).
// Cost: head_dim · 4 / C bytes per token per kv head per full layer (SmolLM2: 16 B, the same
// order as its int8 rank-16 sketch); reading it costs n_chunks · head_dim · 4 bytes and
// G · head_dim FMAs per unselected chunk.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hs {

class ChunkValueMeans {
 public:
  // Storage only for layers with full_layer[l] (the layers that select).
  ChunkValueMeans(const std::vector<bool>& full_layer, int n_kv_heads, int head_dim, int page_tokens, int chunk_tokens,
                  int32_t n_blocks);

  int head_dim() const { return head_dim_; }
  // Fold value v [head_dim] of (layer, kv head, pos) into its chunk's mean. Values of a chunk
  // must arrive in position order: the chunk's first position resets it.
  void write(std::span<const int32_t> blocks, int layer, int head, int32_t pos, const float* v);
  // [head_dim]: the mean of the chunk's values written so far.
  const float* mean(std::span<const int32_t> blocks, int layer, int head, int32_t chunk) const;

 private:
  int n_kv_heads_, head_dim_, P_, C_;
  int64_t page_floats_;                          // n_kv_heads * (P / C) * head_dim
  std::vector<std::vector<float>> layer_data_;  // [n_layer][n_blocks * page_floats] (empty: not a full layer)
};

}  // namespace hs
