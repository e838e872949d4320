// sparse/quest.cpp — see quest.h.
#include "sparse/quest.h"

#include <algorithm>
#include <cmath>

namespace hs {
namespace {
constexpr int32_t kChunksPerTask = 256;  // bound split when a pool is given
}  // namespace

QuestStore::QuestStore(int n_layer, int n_kv_heads, int head_dim, int page_tokens, int chunk_tokens, int32_t n_blocks)
    : n_layer_(n_layer), n_kv_heads_(n_kv_heads), head_dim_(head_dim), P_(page_tokens), C_(chunk_tokens) {
  page_floats_ = static_cast<int64_t>(n_kv_heads) * (P_ / C_) * 2 * head_dim;
  layer_data_.assign(n_layer, std::vector<float>(static_cast<size_t>(n_blocks) * page_floats_, 0.0f));
}

float* QuestStore::chunk_ptr(std::span<const int32_t> blocks, int layer, int head, int32_t chunk) const {
  const int per_page = P_ / C_;
  const int32_t pos = chunk * C_;
  const int64_t off = static_cast<int64_t>(blocks[pos / P_]) * page_floats_ +
                      (static_cast<int64_t>(head) * per_page + (pos % P_) / C_) * 2 * head_dim_;
  return const_cast<float*>(layer_data_[layer].data()) + off;
}

void QuestStore::write(std::span<const int32_t> blocks, int layer, int head, int32_t pos, const float* k) {
  float* mm = chunk_ptr(blocks, layer, head, pos / C_);  // [2][head_dim]
  float* mn = mm;
  float* mx = mm + head_dim_;
  if (pos % C_ == 0) {
    std::copy(k, k + head_dim_, mn);
    std::copy(k, k + head_dim_, mx);
    return;
  }
#pragma omp simd
  for (int d = 0; d < head_dim_; ++d) {
    mn[d] = k[d] < mn[d] ? k[d] : mn[d];
    mx[d] = k[d] > mx[d] ? k[d] : mx[d];
  }
}

const float* QuestStore::chunk_minmax(std::span<const int32_t> blocks, int layer, int head, int32_t chunk) const {
  return chunk_ptr(blocks, layer, head, chunk);
}

void QuestStore::chunk_bounds(std::span<const int32_t> blocks, int layer, int head, const float* q, int n_q,
                              int32_t chunk_begin, int32_t chunk_end, float* out, ThreadPool* pool) const {
  const int hd = head_dim_;
  auto run = [&](int32_t c0, int32_t c1) {
    for (int32_t c = c0; c < c1; ++c) {
      const float* mn = chunk_ptr(blocks, layer, head, c);
      const float* mx = mn + hd;
      float best = -INFINITY;
      for (int g = 0; g < n_q; ++g) {
        const float* qg = q + static_cast<int64_t>(g) * hd;
        float u = 0.0f;
#pragma omp simd reduction(+ : u)
        for (int d = 0; d < hd; ++d) {
          const float a = qg[d] * mn[d], b = qg[d] * mx[d];
          u += a > b ? a : b;
        }
        best = u > best ? u : best;
      }
      out[c - chunk_begin] = best;
    }
  };
  const int32_t n = chunk_end - chunk_begin;
  if (!pool || n <= kChunksPerTask) {
    run(chunk_begin, chunk_end);
    return;
  }
  pool->parallel_for((n + kChunksPerTask - 1) / kChunksPerTask, 1, [&](int64_t tb, int64_t te, int) {
    for (int64_t t = tb; t < te; ++t) {
      const int32_t c0 = chunk_begin + static_cast<int32_t>(t * kChunksPerTask);
      run(c0, std::min(chunk_end, c0 + kChunksPerTask));
    }
  });
}

Result<std::unique_ptr<QuestSelector>> QuestSelector::create(const QuestStore& store, const SparseConfig& cfg) {
  HS_RETURN_IF_ERROR(cfg.validate(store.page_tokens()));
  if (cfg.chunk_tokens != store.chunk_tokens())
    return make_error(StatusCode::kInvalidArgument, "quest: store keeps chunks of {} tokens, config asks for {}",
                      store.chunk_tokens(), cfg.chunk_tokens);
  return std::unique_ptr<QuestSelector>(new QuestSelector(store, cfg));
}

void QuestSelector::chunk_scores(const SelectInput& in, const float* /*prep*/, int32_t chunk_begin, int32_t chunk_end,
                                 float* out) const {
  store_.chunk_bounds(in.blocks, in.layer, in.kv_head, in.q, in.n_q, chunk_begin, chunk_end, out, in.pool);
}

}  // namespace hs
