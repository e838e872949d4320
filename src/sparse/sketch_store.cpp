// sparse/sketch_store.cpp — see sketch_store.h.
#include "sparse/sketch_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"

namespace hs {
namespace {

constexpr int kMaxRank = 1024;           // as SketchBasis::load accepts (head_dim <= 1024)
constexpr int32_t kChunksPerTask = 512;  // chunk-score split when a pool is given

}  // namespace

SketchStore::SketchStore(const SparseKernels& kernels, const SketchBasis& basis, int page_tokens, int32_t n_blocks,
                         SketchElem elem, float residual_z)
    : k_(kernels), basis_(basis), residual_z_(residual_z) {
  g_.n_layer = basis.n_layer;
  g_.n_kv_heads = basis.n_kv_heads;
  g_.rank = basis.rank + (residual_z > 0.0f ? 1 : 0);
  g_.page_tokens = page_tokens;
  g_.elem = elem;
  n_blocks_ = n_blocks;
  layer_data_.resize(g_.n_layer);
  for (int l = 0; l < g_.n_layer; ++l)
    if (basis.has_layer(l)) layer_data_[l].assign(static_cast<size_t>(n_blocks) * g_.page_bytes(), 0);
}

void SketchStore::write(std::span<const int32_t> blocks, int layer, int head, int32_t pos, const float* k) {
  if (!basis_.has_layer(layer)) return;
  const int hd = basis_.head_dim, r = basis_.rank, P = g_.page_tokens;
  const float* B = basis_.B(layer, head);  // [head_dim][rank]
  const float* mu = basis_.mu(layer, head);
  float s[kMaxRank + 1];  // [g_.rank]: the sketch (+ the residual norm)
  for (int j = 0; j < r; ++j) s[j] = 0.0f;
  for (int d = 0; d < hd; ++d) {
    const float x = k[d] - mu[d];
    const float* row = B + static_cast<int64_t>(d) * r;
#pragma omp simd
    for (int j = 0; j < r; ++j) s[j] += x * row[j];
  }
  if (residual_z_ > 0.0f) {
    // r_t = (k − mu) − A s: what the score q·mu + (Aᵀq)·s leaves out is exactly q·r_t.
    const float* A = basis_.A(layer, head);  // [head_dim][rank]
    double norm2 = 0.0;
    for (int d = 0; d < hd; ++d) {
      const float* row = A + static_cast<int64_t>(d) * r;
      float x = k[d] - mu[d];
      for (int j = 0; j < r; ++j) x -= row[j] * s[j];
      norm2 += static_cast<double>(x) * x;
    }
    s[r] = static_cast<float>(std::sqrt(norm2));
  }
  k_.sketch_encode(g_.elem, s, g_.rank, P, pos % P, head_block(blocks, layer, head, pos));
}

void SketchStore::read(std::span<const int32_t> blocks, int layer, int head, int32_t pos, float* s) const {
  k_.sketch_decode(g_.elem, head_block(blocks, layer, head, pos), g_.rank, g_.page_tokens, pos % g_.page_tokens, s);
}

uint8_t* SketchStore::head_block(std::span<const int32_t> blocks, int layer, int head, int32_t pos) const {
  return const_cast<uint8_t*>(view(layer, blocks).head_block(pos, head));
}

PagedSketchView SketchStore::view(int layer, std::span<const int32_t> blocks) const {
  return PagedSketchView{layer_data_[layer].data(), g_.head_bytes(), n_blocks_ * g_.head_bytes(), blocks.data(),
                              g_.page_tokens, g_.rank, g_.elem};
}

void SketchStore::project(int layer, int head, const float* q, int n_q, float* q_hat, float* bias) const {
  // Query side: A (query-aware basis) or B itself (sketch_basis.h).
  const int r = basis_.rank, hd = basis_.head_dim;
  k_.sketch_project_queries(q, n_q, basis_.A(layer, head), basis_.mu(layer, head), hd, r, q_hat, bias);
  if (residual_z_ <= 0.0f) return;
  // Re-stride [G][r] → [G][r + 1] from the last head down, appending z ‖q_g‖ / √head_dim.
  for (int g = n_q - 1; g >= 0; --g) {
    const float* qg = q + static_cast<int64_t>(g) * hd;
    double norm2 = 0.0;
    for (int d = 0; d < hd; ++d) norm2 += static_cast<double>(qg[d]) * qg[d];
    float* dst = q_hat + static_cast<int64_t>(g) * (r + 1);
    std::memmove(dst, q_hat + static_cast<int64_t>(g) * r, sizeof(float) * r);
    dst[r] = residual_z_ * static_cast<float>(std::sqrt(norm2 / hd));
  }
}

void SketchStore::score_tokens(std::span<const int32_t> blocks, int layer, int head, const float* q, int n_q,
                               int32_t begin, int32_t end, float* scores) const {
  std::vector<float> q_hat(static_cast<size_t>(n_q) * g_.rank);  // [G][rank]
  std::vector<float> bias(n_q);                                    // [G]
  project(layer, head, q, n_q, q_hat.data(), bias.data());
  k_.sketch_score(q_hat.data(), bias.data(), n_q, view(layer, blocks), head, begin, end, scores);
}

void SketchStore::chunk_max_scores(std::span<const int32_t> blocks, int layer, int head, const float* q, int n_q,
                                   int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end,
                                   float* chunk_max, ThreadPool* pool) const {
  if (chunk_begin >= chunk_end) return;
  std::vector<float> q_hat(static_cast<size_t>(n_q) * g_.rank);  // [G][rank]
  std::vector<float> bias(n_q);                                    // [G]
  project(layer, head, q, n_q, q_hat.data(), bias.data());
  chunk_max_scores_projected(blocks, layer, head, q_hat.data(), bias.data(), n_q, n_tokens, chunk_tokens, chunk_begin,
                             chunk_end, chunk_max, pool);
}

void SketchStore::chunk_max_scores_projected(std::span<const int32_t> blocks, int layer, int head,
                                             const float* q_hat, const float* bias, int n_q, int32_t n_tokens,
                                             int chunk_tokens, int32_t chunk_begin, int32_t chunk_end,
                                             float* chunk_max, ThreadPool* pool) const {
  if (chunk_begin >= chunk_end) return;
  const PagedSketchView v = view(layer, blocks);
  const int32_t n_chunks = chunk_end - chunk_begin;
  if (!pool || n_chunks <= kChunksPerTask) {
    k_.sketch_chunk_max(q_hat, bias, n_q, v, head, n_tokens, chunk_tokens, chunk_begin, chunk_end, chunk_max);
    return;
  }
  const int64_t n_tasks = (n_chunks + kChunksPerTask - 1) / kChunksPerTask;
  pool->parallel_for(n_tasks, 1, [&](int64_t tb, int64_t te, int) {
    for (int64_t t = tb; t < te; ++t) {
      const int32_t c0 = chunk_begin + static_cast<int32_t>(t * kChunksPerTask);
      const int32_t c1 = std::min<int32_t>(chunk_end, c0 + kChunksPerTask);
      k_.sketch_chunk_max(q_hat, bias, n_q, v, head, n_tokens, chunk_tokens, c0, c1, chunk_max + (c0 - chunk_begin));
    }
  });
}

void SketchStore::chunk_head_mass_projected(std::span<const int32_t> blocks, int layer, int head, const float* q_hat,
                                            const float* bias, int n_q, int32_t n_tokens, int chunk_tokens,
                                            int32_t chunk_begin, int32_t chunk_end, float alpha, float* out) const {
  if (chunk_begin >= chunk_end) return;
  k_.sketch_chunk_head_mass(q_hat, bias, n_q, view(layer, blocks), head, n_tokens, chunk_tokens, chunk_begin,
                              chunk_end, alpha, out);
}

}  // namespace hs
