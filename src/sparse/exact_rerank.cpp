// sparse/exact_rerank.cpp — see exact_rerank.h.
#include "sparse/exact_rerank.h"

#include <algorithm>
#include <cmath>

#include "sparse/exact_chunk_mass.h"

namespace hs {

int32_t auto_rerank_factor(int64_t weight_bytes, int64_t full_layer_heads, int64_t k_row_bytes, int32_t budget_tokens,
                           bool plain_kv) {
  if (!plain_kv || weight_bytes <= 0) return 0;
  const int64_t rerank_bytes = int64_t{kAutoRerankFactor} * budget_tokens * full_layer_heads * k_row_bytes;
  return rerank_bytes * 4 <= weight_bytes ? kAutoRerankFactor : 0;
}

Result<std::unique_ptr<ExactReranker>> ExactReranker::create(const SparseKernels& k, const KvCache& kv,
                                                             float attn_scale, const SparseConfig& cfg, int factor) {
  HS_RETURN_IF_ERROR(cfg.validate(kv.geometry().page_tokens));
  if (factor < 2) return make_error(StatusCode::kInvalidArgument, "sparse rerank: factor {} (needs ≥ 2)", factor);
  if (!kv_dtype_plain(kv.geometry().dtype))
    return make_error(StatusCode::kInvalidArgument,
                      "--sparse-rerank reads exact keys: needs --kv-cache-dtype f16 or f32");
  if (static_cast<int64_t>(cfg.budget_tokens) * factor > (int64_t{1} << 28))
    return make_error(StatusCode::kInvalidArgument, "sparse rerank: budget {} × factor {} is too large",
                      cfg.budget_tokens, factor);
  return std::unique_ptr<ExactReranker>(new ExactReranker(k, kv, attn_scale, cfg, factor));
}

SparseConfig ExactReranker::shortlist_config() const {
  SparseConfig s = cfg_;
  s.budget_tokens = cfg_.budget_tokens * factor_;
  return s;
}

bool ExactReranker::plan(const SelectInput& in, std::span<const int32_t> chunks, Work& w) const {
  w.active = false;
  w.forced.clear();
  w.shortlist.clear();
  if (candidates_fit(in.n_tokens, cfg_)) return false;  // the first stage selected every chunk already
  const auto [first, last] = candidate_range(in.n_tokens, cfg_);
  for (int32_t c : chunks) (c < first || c >= last ? w.forced : w.shortlist).push_back(c);
  if (static_cast<int32_t>(w.shortlist.size()) <= cfg_.budget_chunks()) return false;  // nothing to drop
  w.raw.resize(w.shortlist.size() * in.n_q);
  w.active = true;
  return true;
}

void ExactReranker::score(const SelectInput& in, Work& w, int64_t b, int64_t e) const {
  exact_chunk_log_masses(k_, kv_, scale_, cfg_.chunk_tokens, in, std::span<const int32_t>(w.shortlist).subspan(b, e - b),
                         w.raw.data() + b * in.n_q);
}

int64_t ExactReranker::finish(const SelectInput& in, Work& w, std::vector<int32_t>& chunks) const {
  const int G = in.n_q, C = cfg_.chunk_tokens;
  const auto [first, last] = candidate_range(in.n_tokens, cfg_);
  w.forced_raw.resize(w.forced.size() * G);
  exact_chunk_log_masses(k_, kv_, scale_, C, in, w.forced, w.forced_raw.data());
  w.fixed.assign(G, -INFINITY);
  for (size_t i = 0; i < w.forced.size(); ++i) log_add_exp(w.fixed.data(), w.forced_raw.data() + i * G, G);
  const int64_t n_short = static_cast<int64_t>(w.shortlist.size());
  w.ranking.resize(n_short);
  group_mass_ranking(w.raw.data(), G, static_cast<int32_t>(n_short), w.fixed.data(), w.ranking.data());

  // The shared top-k rule over every candidate: chunks outside the shortlist rank last (-inf).
  w.scores.assign(last - first, -INFINITY);
  for (int64_t i = 0; i < n_short; ++i) w.scores[w.shortlist[i] - first] = w.ranking[i];
  select_top_chunks(w.scores, in.n_tokens, cfg_, chunks);

  int64_t rows = 0;
  for (const auto* list : {&w.shortlist, &w.forced})
    for (int32_t c : *list) rows += std::min<int64_t>(C, in.n_tokens - static_cast<int64_t>(c) * C);
  return rows;
}

int64_t ExactReranker::rerank(const SelectInput& in, std::vector<int32_t>& chunks, ThreadPool* pool) const {
  static thread_local Work w;
  if (!plan(in, chunks, w)) return 0;
  const int64_t n_short = static_cast<int64_t>(w.shortlist.size());
  if (pool && n_short > kRerankChunksPerTask)
    pool->parallel_for(n_short, kRerankChunksPerTask, [&](int64_t b, int64_t e, int) { score(in, w, b, e); });
  else
    score(in, w, 0, n_short);
  return finish(in, w, chunks);
}

}  // namespace hs
