// kv/tier/piece_attention.cpp — see piece_attention.h.
#include "kv/tier/piece_attention.h"

namespace hs {

std::vector<PieceSpan> plan_spans(const DeviceTier& device, const FetchPlan& plan) {
  std::vector<PieceSpan> spans;
  spans.reserve(plan.entries.size());
  for (const FetchEntry& e : plan.entries) spans.push_back({device.piece(plan, e), e.n_valid});
  return spans;
}

void finish_partial(const float* sum, const float* acc, int n_q, int head_dim, float* out) {
  for (int g = 0; g < n_q; ++g) {
    const float inv = sum[g] > 0.0f ? 1.0f / sum[g] : 0.0f;
    for (int d = 0; d < head_dim; ++d) out[g * head_dim + d] = acc[g * head_dim + d] * inv;
  }
}

}  // namespace hs
