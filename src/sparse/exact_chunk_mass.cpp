// sparse/exact_chunk_mass.cpp — see exact_chunk_mass.h.
#include "sparse/exact_chunk_mass.h"

#include <numeric>
#include <vector>

namespace hs {
namespace {

PagedKvView view_of(const KvCache& kv, const SelectInput& in) {
  const KvGeometry& g = kv.geometry();
  return PagedKvView{kv.layer_base(in.layer), g.page_elems(), in.blocks.data(), g.page_tokens, g.head_dim,
                          g.dtype == KvDtype::kF16};
}

}  // namespace

void exact_chunk_log_masses(const SparseKernels& k, const KvCache& kv, float scale, int chunk_tokens,
                            const SelectInput& in, std::span<const int32_t> chunks, float* out) {
  k.chunk_log_mass(in.q, in.n_q, view_of(kv, in), in.kv_head, chunks.data(), static_cast<int>(chunks.size()),
                   chunk_tokens, in.n_tokens, scale, out);
}

void exact_chunk_log_masses(const SparseKernels& k, const KvCache& kv, float scale, int chunk_tokens,
                            const SelectInput& in, int32_t chunk_begin, int32_t chunk_end, float* out) {
  static thread_local std::vector<int32_t> ids;  // [chunk_end - chunk_begin]
  ids.resize(chunk_end - chunk_begin);
  std::iota(ids.begin(), ids.end(), chunk_begin);
  exact_chunk_log_masses(k, kv, scale, chunk_tokens, in, ids, out);
}

}  // namespace hs
