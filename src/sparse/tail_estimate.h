// sparse/tail_estimate.h — the attention the selection leaves out, estimated from the sketch.
//
// Exact sparse attention renormalises over the selected chunks: whatever softmax mass the
// unselected chunks held is dropped. In heads whose attention is diffuse that mass is large
// (docs/sparse-attention.md) and dropping it changes the output. The estimate adds it back as
// one more partial (AttnPartial, merged like the exact ones): per query head g,
//   max_g = max_c L_gc,  sum_g = Σ_c exp(L_gc − max_g),  acc_g = Σ_c exp(L_gc − max_g) · v̄_c
// over the unselected candidate chunks c, where L_gc = log Σ_{t∈c} exp(α · sketch score_g(t))
// is the sketch's estimate of the chunk's unnormalised softmax mass (the group-mass
// selector's raw scores, in the same scaled-logit units as the exact partials) and v̄_c the
// chunk's mean value (chunk_value_means.h). Sinks and window are always selected, so the
// candidates are all that can be missing. Cost per (token, kv head): G · head_dim FMAs and
// head_dim · 4 bytes per unselected chunk.
#pragma once

#include <cstdint>
#include <span>

#include "kv/paged_kv_view.h"
#include "sparse/chunk_value_means.h"

namespace hs {

// log_mass [last - first][n_q]: L_gc of candidate chunks [first, last); selected: ascending
// chunk ids (any, the candidates among them are skipped). Writes part for n_q heads; with no
// unselected candidate, max = −inf, sum = 0, acc = 0 (the merge ignores it).
void estimate_tail(const float* log_mass, int n_q, int32_t first, int32_t last, std::span<const int32_t> selected,
                   const ChunkValueMeans& means, std::span<const int32_t> blocks, int layer, int kv_head,
                   AttnPartial part);

}  // namespace hs
