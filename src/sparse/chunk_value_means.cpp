// sparse/chunk_value_means.cpp — see chunk_value_means.h.
#include "sparse/chunk_value_means.h"

#include <algorithm>

namespace hs {

ChunkValueMeans::ChunkValueMeans(const std::vector<bool>& full_layer, int n_kv_heads, int head_dim, int page_tokens,
                                 int chunk_tokens, int32_t n_blocks)
    : n_kv_heads_(n_kv_heads), head_dim_(head_dim), P_(page_tokens), C_(chunk_tokens) {
  page_floats_ = static_cast<int64_t>(n_kv_heads) * (P_ / C_) * head_dim;
  layer_data_.resize(full_layer.size());
  for (size_t l = 0; l < full_layer.size(); ++l)
    if (full_layer[l]) layer_data_[l].assign(static_cast<size_t>(n_blocks) * page_floats_, 0.0f);
}

const float* ChunkValueMeans::mean(std::span<const int32_t> blocks, int layer, int head, int32_t chunk) const {
  const int32_t pos = chunk * C_;
  const int64_t off = static_cast<int64_t>(blocks[pos / P_]) * page_floats_ +
                      (static_cast<int64_t>(head) * (P_ / C_) + (pos % P_) / C_) * head_dim_;
  return layer_data_[layer].data() + off;
}

void ChunkValueMeans::write(std::span<const int32_t> blocks, int layer, int head, int32_t pos, const float* v) {
  if (layer_data_[layer].empty()) return;
  float* m = const_cast<float*>(mean(blocks, layer, head, pos / C_));  // [head_dim]
  const int i = pos % C_;  // values already folded into this chunk
  if (i == 0) {
    std::copy(v, v + head_dim_, m);
    return;
  }
  const float w = 1.0f / static_cast<float>(i + 1);
#pragma omp simd
  for (int d = 0; d < head_dim_; ++d) m[d] += (v[d] - m[d]) * w;
}

}  // namespace hs
