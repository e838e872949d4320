// engine/sequence.h — the engine's state for one request (one choice of it).
//
// vLLM v1's single rule: `tokens` holds the prompt and every generated token;
// `num_computed` (whose K/V are in the cache) catches up to tokens.size(). A step that
// computes all pending tokens samples the next one; a step that computes fewer is a
// prefill chunk. Preemption drops the KV and sets num_computed back to 0 (recompute; the
// prefix cache usually brings most pages back). Owned by the engine thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/output_text.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"

namespace hs {

struct Sequence {
  uint64_t id = 0;
  RequestParams params;
  std::shared_ptr<RequestChannel> channel;
  std::vector<int32_t> tokens;  // [n_prompt + n_generated]
  int32_t n_prompt = 0;
  int32_t num_computed = 0;     // tokens whose K/V are stored
  SeqKv kv;
  PrefixChain chain;

  int32_t cached_tokens = -1;   // prompt tokens reused at first admission (-1: not admitted yet)
  int n_preemptions = 0;
  bool cancel_requested = false;
  SteadyTime arrival, first_scheduled, deadline = SteadyTime::max();

  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TokenConstraint> constraint;  // params.grammar's state for this choice (null: none)
  std::unique_ptr<OutputText> text;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_generated() const { return n_tokens() - n_prompt; }
  int32_t pending() const { return n_tokens() - num_computed; }
};

}  // namespace hs
