// sparse/exact_chunk_mass.cpp — see exact_chunk_mass.h.
#include "sparse/exact_chunk_mass.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention.h"

namespace hs {
namespace {

// Calls fn(i, chunk id) for each chunk and writes its G log masses at out + i * G.
template <typename ChunkAt>
void log_masses(const KvCache& kv, float scale, int C, const SelectInput& in, int64_t n, ChunkAt chunk_at,
                float* out) {
  const KvGeometry& g = kv.geometry();
  const int G = in.n_q, hd = g.head_dim;
  const cpu::PagedKvView view{kv.layer_base(in.layer), g.page_elems(), in.blocks.data(), g.page_tokens, hd,
                              g.dtype == KvDtype::kF16};
  static thread_local std::vector<float> buf;  // [G][2 + hd] one chunk's partial
  buf.resize(static_cast<size_t>(G) * (2 + hd));
  const cpu::AttnPartial part{buf.data(), buf.data() + G, buf.data() + 2 * G};
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = chunk_at(i);
    float* l = out + i * G;
    const int32_t b = c * C, e = std::min(in.n_tokens, (c + 1) * C);
    if (b >= e) {
      std::fill(l, l + G, -INFINITY);
      continue;
    }
    cpu::attention_partial(in.q, G, view, in.kv_head, b, e, scale, part);
    for (int h = 0; h < G; ++h) l[h] = part.max[h] + std::log(part.sum[h]);
  }
}

}  // namespace

void exact_chunk_log_masses(const KvCache& kv, float scale, int chunk_tokens, const SelectInput& in,
                            std::span<const int32_t> chunks, float* out) {
  log_masses(kv, scale, chunk_tokens, in, static_cast<int64_t>(chunks.size()),
             [&](int64_t i) { return chunks[i]; }, out);
}

void exact_chunk_log_masses(const KvCache& kv, float scale, int chunk_tokens, const SelectInput& in,
                            int32_t chunk_begin, int32_t chunk_end, float* out) {
  log_masses(kv, scale, chunk_tokens, in, chunk_end - chunk_begin,
             [&](int64_t i) { return static_cast<int32_t>(chunk_begin + i); }, out);
}

}  // namespace hs
