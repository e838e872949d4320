// kv/tier/piece_attention.h — attention of one GQA group over the pieces a fetch plan
// resolved to (sinks, ring, hot slots), through kv_attend_pieces (kv/kv_quant.h), which
// reads the tier format directly.
//
// The result is a partial in the convention of backend/cpu/attention.h (running max, sum
// of exp, unnormalized output), so it merges with other partials by attention_merge, or is
// normalized by finish_partial below. Cost: per valid token one K and one V row decode and
// 2·n_q·head_dim FMAs.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_quant.h"
#include "kv/tier/device_tier.h"

namespace hs {

// The pieces of an executed plan, in plan order.
std::vector<PieceSpan> plan_spans(const DeviceTier& device, const FetchPlan& plan);

// q: [n_q][head_dim]. Writes max [n_q], sum [n_q], acc [n_q][head_dim].
inline void attention_over_pieces(const float* q, int n_q, const PieceSpan* pieces, int n_pieces, float scale,
                                  float* max, float* sum, float* acc) {
  kv_attend_pieces(q, n_q, pieces, n_pieces, scale, max, sum, acc);
}
// out [n_q][head_dim] = acc / sum (zeros where sum is 0).
void finish_partial(const float* sum, const float* acc, int n_q, int head_dim, float* out);

}  // namespace hs
