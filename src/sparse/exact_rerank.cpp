// sparse/exact_rerank.cpp — see exact_rerank.h.
#include "sparse/exact_rerank.h"

#include <algorithm>
#include <cmath>

#include "sparse/exact_chunk_mass.h"

namespace hs {

Result<std::unique_ptr<ExactReranker>> ExactReranker::create(const KvCache& kv, float attn_scale,
                                                             const SparseConfig& cfg, int factor) {
  HS_RETURN_IF_ERROR(cfg.validate(kv.geometry().page_tokens));
  if (factor < 2) return make_error(StatusCode::kInvalidArgument, "sparse rerank: factor {} (needs ≥ 2)", factor);
  if (!kv_dtype_plain(kv.geometry().dtype))
    return make_error(StatusCode::kInvalidArgument,
                      "--sparse-rerank reads exact keys: needs --kv-cache-dtype f16 or f32");
  if (static_cast<int64_t>(cfg.budget_tokens) * factor > (int64_t{1} << 28))
    return make_error(StatusCode::kInvalidArgument, "sparse rerank: budget {} × factor {} is too large",
                      cfg.budget_tokens, factor);
  return std::unique_ptr<ExactReranker>(new ExactReranker(kv, attn_scale, cfg, factor));
}

SparseConfig ExactReranker::shortlist_config() const {
  SparseConfig s = cfg_;
  s.budget_tokens = cfg_.budget_tokens * factor_;
  return s;
}

int64_t ExactReranker::rerank(const SelectInput& in, std::vector<int32_t>& chunks, ThreadPool* pool) const {
  if (candidates_fit(in.n_tokens, cfg_)) return 0;  // the first stage selected every chunk already
  const auto [first, last] = candidate_range(in.n_tokens, cfg_);
  const int G = in.n_q, C = cfg_.chunk_tokens;
  std::vector<int32_t> forced, shortlist;
  for (int32_t c : chunks) (c < first || c >= last ? forced : shortlist).push_back(c);
  if (static_cast<int32_t>(shortlist.size()) <= cfg_.budget_chunks()) return 0;  // nothing to drop

  // raw [n_short][G] exact log masses; forced_raw [n_forced][G].
  const int64_t n_short = static_cast<int64_t>(shortlist.size());
  std::vector<float> raw(static_cast<size_t>(n_short) * G), forced_raw(forced.size() * G);
  constexpr int64_t kChunksPerTask = 32;
  auto score = [&](int64_t b, int64_t e, int) {
    exact_chunk_log_masses(kv_, scale_, C, in, std::span<const int32_t>(shortlist).subspan(b, e - b),
                           raw.data() + b * G);
  };
  if (pool && n_short > kChunksPerTask)
    pool->parallel_for(n_short, kChunksPerTask, score);
  else
    score(0, n_short, 0);
  exact_chunk_log_masses(kv_, scale_, C, in, forced, forced_raw.data());

  std::vector<float> fixed(G, -INFINITY);  // [G] log mass of sinks + window
  for (size_t i = 0; i < forced.size(); ++i)
    for (int g = 0; g < G; ++g) {
      const float l = forced_raw[i * G + g], hi = std::max(fixed[g], l);
      if (hi > -INFINITY) fixed[g] = hi + std::log(std::exp(fixed[g] - hi) + std::exp(l - hi));
    }
  std::vector<float> ranking(n_short);
  group_mass_ranking(raw.data(), G, static_cast<int32_t>(n_short), fixed.data(), ranking.data());

  // The shared top-k rule over every candidate: chunks outside the shortlist rank last (-inf).
  std::vector<float> scores(last - first, -INFINITY);
  for (int64_t i = 0; i < n_short; ++i) scores[shortlist[i] - first] = ranking[i];
  select_top_chunks(scores, in.n_tokens, cfg_, chunks);

  int64_t rows = 0;
  for (int32_t c : shortlist) rows += std::min<int64_t>(C, in.n_tokens - static_cast<int64_t>(c) * C);
  for (int32_t c : forced) rows += std::min<int64_t>(C, in.n_tokens - static_cast<int64_t>(c) * C);
  return rows;
}

}  // namespace hs
