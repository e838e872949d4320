// sparse/sparse_attention.cpp — see sparse_attention.h.
#include "sparse/sparse_attention.h"

#include <algorithm>
#include <cmath>

#include "core/fp16.h"

namespace hs {

void chunk_ranges(std::span<const int32_t> chunks, int chunk_tokens, int32_t n_tokens, int32_t split_tokens,
                  std::vector<KeyRange>& out) {
  out.clear();
  auto emit = [&](int32_t b, int32_t e) {
    if (split_tokens <= 0) {
      out.push_back({b, e});
      return;
    }
    for (int32_t x = b; x < e; x += split_tokens) out.push_back({x, std::min(e, x + split_tokens)});
  };
  int32_t run_b = -1, run_e = -1;
  for (int32_t c : chunks) {
    const int32_t b = c * chunk_tokens;
    const int32_t e = std::min(n_tokens, b + chunk_tokens);
    if (b >= e) continue;
    if (b == run_e) {
      run_e = e;
      continue;
    }
    if (run_b >= 0) emit(run_b, run_e);
    run_b = b;
    run_e = e;
  }
  if (run_b >= 0) emit(run_b, run_e);
}

void sparse_attention(const float* q, int n_q, const cpu::PagedKvView& kv, int kv_head,
                      std::span<const KeyRange> ranges, float scale, float* out, SparseAttnScratch& scratch) {
  const int hd = kv.head_dim;
  const int64_t part_floats = static_cast<int64_t>(n_q) * (2 + hd);
  const size_t n = ranges.size();
  if (scratch.partials.size() < n * part_floats) scratch.partials.resize(n * part_floats);
  scratch.parts.resize(n);
  for (size_t i = 0; i < n; ++i) {
    float* base = scratch.partials.data() + i * part_floats;
    scratch.parts[i] = cpu::AttnPartial{base, base + n_q, base + 2 * n_q};
    cpu::attention_partial(q, n_q, kv, kv_head, ranges[i].begin, ranges[i].end, scale, scratch.parts[i]);
  }
  cpu::attention_merge(scratch.parts.data(), static_cast<int>(n), n_q, hd, out);
}

void sparse_attention_chunks(const float* q, int n_q, const cpu::PagedKvView& kv, int kv_head,
                             std::span<const int32_t> chunks, int chunk_tokens, int32_t n_tokens,
                             int32_t split_tokens, float scale, float* out, SparseAttnScratch& scratch) {
  chunk_ranges(chunks, chunk_tokens, n_tokens, split_tokens, scratch.ranges);
  sparse_attention(q, n_q, kv, kv_head, scratch.ranges, scale, out, scratch);
}

namespace {

// logits [n_tokens] = scale · q_g·k_t of one query head, in double; returns their max.
double head_logits(const float* qg, const cpu::PagedKvView& kv, int kv_head, int32_t n_tokens, float scale,
                   double* logits) {
  const int hd = kv.head_dim, P = kv.page_tokens;
  double mx = -INFINITY;
  for (int32_t t = 0; t < n_tokens; ++t) {
    const int64_t off = static_cast<int64_t>(kv.blocks[t / P]) * kv.page_elems +
                        (static_cast<int64_t>(kv_head) * P + t % P) * 2 * hd;
    double dot = 0.0;
    if (kv.f16) {
      const uint16_t* k = static_cast<const uint16_t*>(kv.layer_base) + off;
      for (int d = 0; d < hd; ++d) dot += static_cast<double>(qg[d]) * fp16_to_fp32(k[d]);
    } else {
      const float* k = static_cast<const float*>(kv.layer_base) + off;
      for (int d = 0; d < hd; ++d) dot += static_cast<double>(qg[d]) * k[d];
    }
    logits[t] = dot * scale;
    mx = std::max(mx, logits[t]);
  }
  return mx;
}

}  // namespace

double attention_mass_recall(const float* q, int n_q, const cpu::PagedKvView& kv, int kv_head, int32_t n_tokens,
                             float scale, std::span<const int32_t> chunks, int chunk_tokens) {
  if (n_tokens <= 0 || n_q <= 0) return 1.0;
  const int hd = kv.head_dim;
  std::vector<uint8_t> selected(n_tokens, 0);  // [n_tokens]
  for (int32_t c : chunks)
    for (int32_t t = c * chunk_tokens; t < std::min(n_tokens, (c + 1) * chunk_tokens); ++t)
      if (t >= 0) selected[t] = 1;
  std::vector<double> logits(n_tokens);  // [n_tokens] of one query head
  double recall = 0.0;
  for (int g = 0; g < n_q; ++g) {
    const double mx = head_logits(q + static_cast<int64_t>(g) * hd, kv, kv_head, n_tokens, scale, logits.data());
    double total = 0.0, kept = 0.0;
    for (int32_t t = 0; t < n_tokens; ++t) {
      const double p = std::exp(logits[t] - mx);
      total += p;
      if (selected[t]) kept += p;
    }
    recall += kept / total;
  }
  return recall / n_q;
}

OracleRecall oracle_mass_recall(const float* q, int n_q, const cpu::PagedKvView& kv, int kv_head, int32_t n_tokens,
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
  std::vector<double> logits(n_tokens);      // [n_tokens] of one query head
  std::vector<double> prob(n_tokens, 0.0);   // [n_tokens] softmax probability, mean over the heads
  std::vector<float> max_score(last - first, -INFINITY);  // [candidates] exact max_t max_g logit
  for (int g = 0; g < n_q; ++g) {
    const double mx = head_logits(q + static_cast<int64_t>(g) * hd, kv, kv_head, n_tokens, scale, logits.data());
    double total = 0.0;
    for (int32_t t = 0; t < n_tokens; ++t) total += std::exp(logits[t] - mx);
    for (int32_t t = 0; t < n_tokens; ++t) prob[t] += std::exp(logits[t] - mx) / total / n_q;
    for (int32_t c = first; c < last; ++c)
      for (int32_t t = c * C; t < std::min(n_tokens, (c + 1) * C); ++t)
        max_score[c - first] = std::max(max_score[c - first], static_cast<float>(logits[t]));
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
