// engine/sampler.cpp — see sampler.h.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace hs {

Status SamplingParams::validate() const {
  auto bad = [](const char* name, double v, const char* range) {
    return make_error(StatusCode::kInvalidArgument, "{} = {} is out of range ({})", name, v, range);
  };
  if (!(temperature >= 0 && temperature <= 100)) return bad("temperature", temperature, "0..100");
  if (top_k < 0) return bad("top_k", top_k, ">= 0");
  if (!(top_p > 0 && top_p <= 1)) return bad("top_p", top_p, "(0, 1]");
  if (!(min_p >= 0 && min_p <= 1)) return bad("min_p", min_p, "[0, 1]");
  if (!(repetition_penalty > 0 && repetition_penalty <= 10)) return bad("repetition_penalty", repetition_penalty, "(0, 10]");
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) return bad("presence_penalty", presence_penalty, "-2..2");
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) return bad("frequency_penalty", frequency_penalty, "-2..2");
  for (const auto& [tok, b] : logit_bias)
    if (!(b >= -100 && b <= 100)) return bad("logit_bias", b, "-100..100");
  return Status::ok();
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed ? *p.seed : std::random_device{}()) {}

void Sampler::accept(int32_t token) { ++counts_[token]; }

int32_t Sampler::sample(std::span<float> logits) {
  const int n = static_cast<int>(logits.size());
  for (const auto& [tok, b] : p_.logit_bias)
    if (tok >= 0 && tok < n) logits[tok] += b;
  // Penalties on tokens seen so far.
  if (p_.repetition_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    for (const auto& [tok, cnt] : counts_) {
      if (tok < 0 || tok >= n) continue;
      float& l = logits[tok];
      if (p_.repetition_penalty != 1.0f) l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
      l -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(cnt);
    }
  }
  if (p_.temperature == 0.0f)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());

  const float inv_t = 1.0f / p_.temperature;
  const float mx = *std::max_element(logits.begin(), logits.end());
  // Candidates: top-k first (partial sort), else all tokens sorted only if top-p needs it.
  cand_.clear();
  cand_.reserve(n);
  for (int i = 0; i < n; ++i) cand_.emplace_back((logits[i] - mx) * inv_t, i);
  size_t keep = cand_.size();
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first; };
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = p_.top_k;
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_logit);
    cand_.resize(keep);
  } else if (p_.top_p < 1.0f || p_.min_p > 0.0f) {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Probabilities of the kept candidates.
  double sum = 0;
  for (auto& c : cand_) sum += std::exp(static_cast<double>(c.first));
  std::vector<double> probs(cand_.size());
  for (size_t i = 0; i < cand_.size(); ++i) probs[i] = std::exp(static_cast<double>(cand_[i].first)) / sum;
  if (p_.top_p < 1.0f) {  // smallest prefix with mass >= top_p (candidates are sorted)
    double cum = 0;
    size_t i = 0;
    for (; i < probs.size(); ++i) {
      cum += probs[i];
      if (cum >= p_.top_p) { ++i; break; }
    }
    probs.resize(std::max<size_t>(1, std::min(i, probs.size())));
  }
  if (p_.min_p > 0.0f) {  // drop tokens below min_p * max probability (probs[0] is the max)
    const double cut = p_.min_p * probs[0];
    size_t i = 1;
    while (i < probs.size() && probs[i] >= cut) ++i;
    probs.resize(i);
  }
  std::discrete_distribution<size_t> dist(probs.begin(), probs.end());
  return cand_[dist(rng_)].second;
}

}  // namespace hs
