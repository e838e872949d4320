// backend/cpu_sparse_attention.cpp — see cpu_sparse_attention.h.
#include "backend/cpu_sparse_attention.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/simd_math.h"

namespace hs {

void sparse_attention(const float* q, int n_q, const PagedKvView& kv, int kv_head,
                      std::span<const KeyRange> ranges, float scale, float* out, SparseAttnScratch& scratch) {
  const int hd = kv.head_dim;
  const int64_t part_floats = static_cast<int64_t>(n_q) * (2 + hd);
  const size_t n = ranges.size();
  if (scratch.partials.size() < n * part_floats) scratch.partials.resize(n * part_floats);
  scratch.parts.resize(n);
  for (size_t i = 0; i < n; ++i) {
    float* base = scratch.partials.data() + i * part_floats;
    scratch.parts[i] = AttnPartial{base, base + n_q, base + 2 * n_q};
    cpu::attention_partial(q, n_q, kv, kv_head, ranges[i].begin, ranges[i].end, scale, scratch.parts[i]);
  }
  cpu::attention_merge(scratch.parts.data(), static_cast<int>(n), n_q, hd, out);
}

void sparse_attention_chunks(const float* q, int n_q, const PagedKvView& kv, int kv_head,
                             std::span<const int32_t> chunks, int chunk_tokens, int32_t n_tokens,
                             int32_t split_tokens, float scale, float* out, SparseAttnScratch& scratch) {
  chunk_ranges(chunks, chunk_tokens, n_tokens, split_tokens, scratch.ranges);
  sparse_attention(q, n_q, kv, kv_head, scratch.ranges, scale, out, scratch);
}

namespace {

// One query head's exact attention over keys [0, n_tokens): logits (SIMD float dot products,
// cpu::key_scores) and p[t] = exp(logit_t - max) (polynomial exp, |rel err| < 2e-7); returns
// Σ p in double. The recall measurements' cost: O(n_tokens · head_dim) per head.
double head_softmax(const float* qg, const PagedKvView& kv, int kv_head, int32_t n_tokens, float scale,
                    std::vector<float>& logits, std::vector<float>& p) {
  logits.resize(static_cast<size_t>(n_tokens));
  p.resize(static_cast<size_t>(n_tokens));
  cpu::key_scores(qg, kv, kv_head, n_tokens, scale, logits.data());
  float mx = -INFINITY;
  for (int32_t t = 0; t < n_tokens; ++t) mx = std::max(mx, logits[t]);
  const float* lg = logits.data();
  float* pp = p.data();
#pragma omp simd
  for (int32_t t = 0; t < n_tokens; ++t) pp[t] = cpu::detail::exp_nonpositive(lg[t] - mx);
  double total = 0.0;
  for (int32_t t = 0; t < n_tokens; ++t) total += pp[t];
  return total;
}

}  // namespace

double attention_mass_recall(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t n_tokens,
                             float scale, std::span<const int32_t> chunks, int chunk_tokens) {
  if (n_tokens <= 0 || n_q <= 0) return 1.0;
  const int hd = kv.head_dim;
  std::vector<uint8_t> selected(n_tokens, 0);  // [n_tokens]
  for (int32_t c : chunks)
    for (int32_t t = c * chunk_tokens; t < std::min(n_tokens, (c + 1) * chunk_tokens); ++t)
      if (t >= 0) selected[t] = 1;
  std::vector<float> logits, p;  // [n_tokens] of one query head
  double recall = 0.0;
  for (int g = 0; g < n_q; ++g) {
    const double total = head_softmax(q + static_cast<int64_t>(g) * hd, kv, kv_head, n_tokens, scale, logits, p);
    double kept = 0.0;
    for (int32_t t = 0; t < n_tokens; ++t)
      if (selected[t]) kept += p[t];
    recall += kept / total;
  }
  return recall / n_q;
}

OracleRecall oracle_mass_recall(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t n_tokens,
                                float scale, const SparseConfig& cfg, std::vector<int32_t>* exact_max_chunks,
                                std::vector<int32_t>* mass_chunks) {
  OracleRecall out;
  std::vector<int32_t> local_max, local_mass;
  std::vector<int32_t>& max_sel = exact_max_chunks ? *exact_max_chunks : local_max;
  std::vector<int32_t>& mass_sel = mass_chunks ? *mass_chunks : local_mass;
  if (n_tokens <= 0 || n_q <= 0) {
    max_sel.clear();
    mass_sel.clear();
    return out;
  }
  const int hd = kv.head_dim, C = cfg.chunk_tokens;
  const auto [first, last] = candidate_range(n_tokens, cfg);
  std::vector<float> logits, p;              // [n_tokens] of one query head
  std::vector<double> prob(n_tokens, 0.0);   // [n_tokens] softmax probability, mean over the heads
  std::vector<float> max_score(last - first, -INFINITY);  // [candidates] exact max_t max_g logit
  for (int g = 0; g < n_q; ++g) {
    const double total = head_softmax(q + static_cast<int64_t>(g) * hd, kv, kv_head, n_tokens, scale, logits, p);
    const double w = 1.0 / (total * n_q);
    for (int32_t t = 0; t < n_tokens; ++t) prob[t] += p[t] * w;
    for (int32_t c = first; c < last; ++c)
      for (int32_t t = c * C; t < std::min(n_tokens, (c + 1) * C); ++t)
        max_score[c - first] = std::max(max_score[c - first], logits[t]);
  }
  std::vector<float> mass_score(last - first, 0.0f);  // [candidates] the chunk's share of the mass
  for (int32_t c = first; c < last; ++c) {
    double m = 0.0;
    for (int32_t t = c * C; t < std::min(n_tokens, (c + 1) * C); ++t) m += prob[t];
    mass_score[c - first] = static_cast<float>(m);
  }
  auto recall_of = [&](const std::vector<int32_t>& chunks) {
    if (static_cast<int32_t>(chunks.size()) == n_chunks_of(n_tokens, C)) return 1.0;  // every chunk
    double kept = 0.0;
    for (int32_t c : chunks)
      for (int32_t t = c * C; t < std::min(n_tokens, (c + 1) * C); ++t) kept += prob[t];
    return kept;
  };
  select_top_chunks(max_score, n_tokens, cfg, max_sel);
  select_top_chunks(mass_score, n_tokens, cfg, mass_sel);
  out.exact_max = recall_of(max_sel);
  out.mass = recall_of(mass_sel);
  return out;
}

}  // namespace hs
