// engine/logprobs.cpp — see logprobs.h.
#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace hs {

TokenLogprob compute_logprobs(std::span<const float> logits, int32_t chosen, int k) {
  float mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  TokenLogprob out;
  out.token = chosen;
  out.logprob = logits[chosen] - lse;
  if (k > 0) {
    k = std::min<int>(k, static_cast<int>(logits.size()));
    std::vector<int32_t> idx(logits.size());  // [n_vocab]
    std::iota(idx.begin(), idx.end(), 0);
    auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
    for (int i = 0; i < k; ++i) out.top.emplace_back(idx[i], logits[idx[i]] - lse);
  }
  return out;
}

}  // namespace hs
