// sparse/quest.h — Quest-style chunk selection (Tang et al. 2024), for comparison with the sketch.
//
// Per chunk of C tokens and kv head: the elementwise min and max of its keys, kept in pages
// parallel to the KV pages: per layer, page b holds [n_kv_heads][P / C][2][head_dim] float32
// (min row, then max row), updated incrementally as keys are appended. For a query q the
// chunk's score is the upper bound
//   U(q) = Σ_d max(q_d · min_d, q_d · max_d)  >=  q · k  for every key k of the chunk,
// and with GQA the max of U over the group's query heads. Float32 keeps the bound a true
// bound (an f16 min/max would have to be rounded outward).
// Cost: 2 · head_dim · 4 / C bytes per token per kv head per layer (head_dim 256, C 16: 128 B,
// the same as an f16 rank-64 sketch); scoring reads 2 · head_dim · 4 bytes and does
// 2 · G · head_dim multiplies per chunk.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "sparse/selector.h"

namespace hs {

class QuestStore {
 public:
  QuestStore(int n_layer, int n_kv_heads, int head_dim, int page_tokens, int chunk_tokens, int32_t n_blocks);

  int head_dim() const { return head_dim_; }
  int page_tokens() const { return P_; }
  int chunk_tokens() const { return C_; }

  // Fold key k [head_dim] of (layer, kv head, pos) into its chunk's min/max. Keys of a chunk
  // must arrive in position order: the chunk's first position resets it.
  void write(std::span<const int32_t> blocks, int layer, int head, int32_t pos, const float* k);
  // [2][head_dim]: min row then max row of chunk `chunk`.
  const float* chunk_minmax(std::span<const int32_t> blocks, int layer, int head, int32_t chunk) const;

  // out [chunk_end - chunk_begin]: max_g U_g(chunk) for q [n_q][head_dim].
  void chunk_bounds(std::span<const int32_t> blocks, int layer, int head, const float* q, int n_q,
                    int32_t chunk_begin, int32_t chunk_end, float* out, ThreadPool* pool = nullptr) const;

 private:
  float* chunk_ptr(std::span<const int32_t> blocks, int layer, int head, int32_t chunk) const;

  int n_layer_, n_kv_heads_, head_dim_, P_, C_;
  int64_t page_floats_;                          // n_kv_heads * (P / C) * 2 * head_dim
  std::vector<std::vector<float>> layer_data_;  // [n_layer][n_blocks * page_floats]
};

class QuestSelector final : public ChunkSelector {
 public:
  // Checks cfg against the store (same C, C divides P).
  static Result<std::unique_ptr<QuestSelector>> create(const QuestStore& store, const SparseConfig& cfg);
  const char* name() const override { return "quest"; }
  void chunk_scores(const SelectInput& in, const float* prep, int32_t chunk_begin, int32_t chunk_end,
                    float* out) const override;

 private:
  QuestSelector(const QuestStore& store, const SparseConfig& cfg) : ChunkSelector(cfg), store_(store) {}
  const QuestStore& store_;
};

}  // namespace hs
