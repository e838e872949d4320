// engine/logprobs.h — log-probabilities of the raw model distribution for OpenAI's
// `logprobs` / `top_logprobs` (as vLLM reports them: before temperature and penalties).
//
// Cost: one pass for the log-sum-exp plus a partial selection of the top k: O(n_vocab).
#pragma once

#include <cstdint>
#include <span>

#include "engine/request.h"

namespace hs {

// log softmax of `logits` at `chosen`, plus the k most likely tokens (best first).
TokenLogprob compute_logprobs(std::span<const float> logits, int32_t chosen, int k);

}  // namespace hs
