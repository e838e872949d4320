// engine/sampler.h — turns one logits row into the next token.
//
// Order (as vLLM): repetition/presence/frequency penalties over the tokens seen so far →
// temperature (0 = greedy argmax) → top-k → top-p → min-p → draw with a per-request
// seeded generator, so a fixed seed reproduces a completion. Cost: O(n_vocab) for
// penalties and the argmax; top-k/top-p sort only the kept candidates (partial sort).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hs {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off (divides positive logits, multiplies negative)
  float presence_penalty = 0.0f;    // subtract once per seen token
  float frequency_penalty = 0.0f;   // subtract per occurrence
  std::optional<uint64_t> seed;     // none: random
  // OpenAI's logit_bias: added to a token's logit before everything else (-100..100; ±100
  // bans or forces a token in practice). Token ids are checked by the engine.
  std::vector<std::pair<int32_t, float>> logit_bias;

  Status validate() const;  // ranges as OpenAI / vLLM document them
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Record a token as seen (prompt and generated tokens both count for penalties).
  void accept(int32_t token);
  // Picks a token from logits (modified in place).
  int32_t sample(std::span<float> logits);
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> counts_;  // token → occurrences
  std::vector<std::pair<float, int32_t>> cand_;  // scratch [n_kept]
};

}  // namespace hs
