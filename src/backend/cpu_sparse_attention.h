// backend/cpu_sparse_attention.h — the CPU backend's exact softmax attention over the selected
// chunks of paged KV, and the mass-recall metrics of the eval.
//
// The selected chunks become key ranges (sparse/chunk_ranges.h); each range is one
// cpu::attention_partial (online softmax, every K|V row read once for the G query heads), and
// the partials are merged with cpu::attention_merge — the same kernels as dense attention,
// so selecting every chunk with the same split reproduces dense attention bit for bit.
// Cost: reads only the selected rows (selected tokens · 2 · head_dim elements per kv head).
// attention_mass_recall is the quality metric of the eval, not a hot path: it computes the
// dense softmax in double, O(n_tokens · head_dim · G). oracle_mass_recall (same cost) is its
// ceiling: the recall of selections made with the exact scores from the real KV.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/attention.h"
#include "sparse/chunk_ranges.h"
#include "sparse/selector.h"
#include "sparse/sparse_runtime.h"  // OracleRecall

namespace hs {

// Scratch for sparse_attention (reused across calls by one thread).
struct SparseAttnScratch {
  std::vector<float> partials;             // [n_ranges][G][2 + head_dim]
  std::vector<AttnPartial> parts;          // [n_ranges] views into partials
  std::vector<KeyRange> ranges;
};

// out [G][head_dim] = softmax attention of q [G][head_dim] over the keys in `ranges`.
// No ranges: out is zero.
void sparse_attention(const float* q, int n_q, const PagedKvView& kv, int kv_head,
                      std::span<const KeyRange> ranges, float scale, float* out, SparseAttnScratch& scratch);

// Convenience: chunks -> ranges (split_tokens as chunk_ranges) -> sparse_attention.
void sparse_attention_chunks(const float* q, int n_q, const PagedKvView& kv, int kv_head,
                             std::span<const int32_t> chunks, int chunk_tokens, int32_t n_tokens,
                             int32_t split_tokens, float scale, float* out, SparseAttnScratch& scratch);

// Share of the dense softmax mass over keys [0, n_tokens) that falls on the selected chunks,
// per query head, averaged over the G heads. 1 when every chunk is selected.
double attention_mass_recall(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t n_tokens,
                             float scale, std::span<const int32_t> chunks, int chunk_tokens);

// Mass recall of two oracle selections, both with the selectors' rule (select_top_chunks: sinks,
// window, the top cfg.budget_chunks() candidate chunks), from the exact logits of the real KV:
//   exact_max: chunks ranked by the exact max over their tokens of max_g q_g·k_t — the
//              sketch's rule with a perfect sketch (what any rank r can at best reach);
//   mass:      chunks ranked by their share of the dense softmax mass (mean over the G heads).
//              Recall is additive over chunks, so this is the best selection of that size:
//              >= the recall of every other selection with the same number of chunks.
// Both are 1 when the candidates fit in the budget. The chosen chunks go to the optional outputs.
OracleRecall oracle_mass_recall(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t n_tokens,
                                float scale, const SparseConfig& cfg, std::vector<int32_t>* exact_max_chunks = nullptr,
                                std::vector<int32_t>* mass_chunks = nullptr);

}  // namespace hs
