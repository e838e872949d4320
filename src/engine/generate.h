// engine/generate.h — single-sequence generation loop (CLI `generate` / `chat`, tests).
//
// Prefills the prompt in chunks, then decodes one token per forward until max_tokens, an
// end-of-generation token (unless ignore_eos) or a stop string. The server's engine
// (continuous batching) supersedes this for serving; this loop is the simplest correct
// path and the reference the server's greedy output is compared with.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "model/language_model.h"
#include "tokenizer/tokenizer.h"

namespace hs {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 128;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  int prefill_chunk = 512;
};

enum class FinishReason { kLength, kStop, kEos };
const char* finish_reason_name(FinishReason r);

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kLength;
  double prefill_seconds = 0, decode_seconds = 0;
};

// on_text receives each newly complete piece of output text; return false to stop early.
using TextCallback = std::function<bool(std::string_view)>;

Result<GenerateResult> generate(LanguageModel& model, const Tokenizer& tok, KvCache& kv, ThreadPool& pool,
                                const GenerateRequest& req, const TextCallback& on_text = {});

}  // namespace hs
