// sparse/tail_estimate.cpp — see tail_estimate.h.
#include "sparse/tail_estimate.h"

#include <algorithm>
#include <cmath>

namespace hs {

void estimate_tail(const float* log_mass, int n_q, int32_t first, int32_t last, std::span<const int32_t> selected,
                   const ChunkValueMeans& means, std::span<const int32_t> blocks, int layer, int kv_head,
                   AttnPartial part) {
  const int hd = means.head_dim();
  for (int g = 0; g < n_q; ++g) {
    part.max[g] = -INFINITY;
    part.sum[g] = 0.0f;
  }
  std::fill(part.acc, part.acc + static_cast<int64_t>(n_q) * hd, 0.0f);
  // Pass 1: each head's max over the unselected candidates.
  auto for_each_unselected = [&](auto&& fn) {
    auto it = std::lower_bound(selected.begin(), selected.end(), first);
    for (int32_t c = first; c < last; ++c) {
      while (it != selected.end() && *it < c) ++it;
      if (it != selected.end() && *it == c) continue;
      fn(c, log_mass + static_cast<int64_t>(c - first) * n_q);
    }
  };
  for_each_unselected([&](int32_t, const float* l) {
    for (int g = 0; g < n_q; ++g) part.max[g] = std::max(part.max[g], l[g]);
  });
  // Pass 2: weights and the weighted mean values.
  for_each_unselected([&](int32_t c, const float* l) {
    const float* v = means.mean(blocks, layer, kv_head, c);  // [hd]
    for (int g = 0; g < n_q; ++g) {
      if (part.max[g] == -INFINITY) continue;
      const float w = std::exp(l[g] - part.max[g]);
      part.sum[g] += w;
      float* acc = part.acc + static_cast<int64_t>(g) * hd;
#pragma omp simd
      for (int d = 0; d < hd; ++d) acc[d] += w * v[d];
    }
  });
}

}  // namespace hs
