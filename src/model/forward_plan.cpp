// model/forward_plan.cpp — see forward_plan.h.
#include "model/forward_plan.h"

#include <algorithm>

namespace hs {

Status build_forward_plan(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, ThreadPool& pool, int n_vocab,
                       ForwardPlan& plan, std::vector<int32_t>& next_pos) {
  const int64_t n = batch.size();
  for (int64_t t = 0; t < n; ++t) {
    const int32_t s = batch.seq_index[t];
    if (s < 0 || s >= static_cast<int32_t>(seqs.size()))
      return make_error(StatusCode::kInvalidArgument, "forward: token {} has sequence index {} of {}", t, s,
                        seqs.size());
    if (batch.tokens[t] < 0 || batch.tokens[t] >= n_vocab)
      return make_error(StatusCode::kInvalidArgument, "forward: token id {} outside the vocabulary ({})",
                        batch.tokens[t], n_vocab);
  }
  next_pos.resize(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) next_pos[s] = seqs[s]->n_tokens;
  for (int64_t t = 0; t < n; ++t) {
    int32_t& np = next_pos[batch.seq_index[t]];
    if (batch.positions[t] != np)
      return make_error(StatusCode::kInvalidArgument, "forward: token {} at position {}, sequence expects {}", t,
                        batch.positions[t], np);
    ++np;
  }
  for (size_t s = 0; s < seqs.size(); ++s) HS_RETURN_IF_ERROR(kv.reserve(*seqs[s], next_pos[s]));

  plan.tokens = batch.tokens;
  plan.positions = batch.positions;
  plan.seq_index = batch.seq_index;
  plan.seqs = seqs;
  plan.kv = &kv;
  plan.pool = &pool;
  plan.seq_tokens.assign(seqs.size(), 0);
  for (int64_t t = 0; t < n; ++t) ++plan.seq_tokens[batch.seq_index[t]];
  plan.logit_rows.clear();
  plan.max_kv_len = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (batch.want_logits[t]) plan.logit_rows.push_back(static_cast<int32_t>(t));
    plan.max_kv_len = std::max(plan.max_kv_len, batch.positions[t] + 1);
  }
  plan.page_indptr.assign(1, 0);
  plan.page_indices.clear();
  for (SeqKv* s : seqs) {
    plan.page_indices.insert(plan.page_indices.end(), s->blocks.begin(), s->blocks.end());
    plan.page_indptr.push_back(static_cast<int32_t>(plan.page_indices.size()));
  }
  return Status::ok();
}

}  // namespace hs
