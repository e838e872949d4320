// engine/generate.cpp — see generate.h.
#include "engine/generate.h"

#include <chrono>

#include "engine/output_text.h"

namespace hs {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kEos: return "stop";
  }
  return "?";
}

Result<GenerateResult> generate(LanguageModel& model, const Tokenizer& tok, KvCache& kv, ThreadPool& pool,
                                const GenerateRequest& req, const TextCallback& on_text) {
  using Clock = std::chrono::steady_clock;
  const ModelConfig& c = model.config();
  if (req.prompt.empty()) return make_error(StatusCode::kInvalidArgument, "generate: empty prompt");
  HS_RETURN_IF_ERROR(req.sampling.validate());
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
  const int64_t capacity = static_cast<int64_t>(kv.pool().n_free()) * kv.geometry().page_tokens;
  if (total > capacity)
    return make_error(StatusCode::kInvalidArgument,
                      "generate: prompt ({} tokens) + max_tokens ({}) exceeds the KV capacity of {} tokens",
                      req.prompt.size(), req.max_tokens, capacity);

  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  struct Release {  // frees the pages on every path out
    KvCache& kv; SeqKv& seq;
    ~Release() { kv.release(seq); }
  } release{kv, seq};

  Sampler sampler(req.sampling);
  for (int32_t t : req.prompt) sampler.accept(t);
  GenerateResult res;
  std::vector<float> logits;
  auto t0 = Clock::now();
  const int n = static_cast<int>(req.prompt.size());
  for (int start = 0; start < n; start += req.prefill_chunk) {
    Batch b;
    const int end = std::min(n, start + req.prefill_chunk);
    for (int p = start; p < end; ++p) b.add(req.prompt[p], p, 0, p == n - 1);
    HS_RETURN_IF_ERROR(model.forward_copy(b, seqs, kv, pool, logits));
  }
  auto t1 = Clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  OutputText out(tok, req.stop);
  for (int step = 0; step < req.max_tokens; ++step) {
    const int32_t next = sampler.sample(std::span<float>(logits.data(), c.n_vocab));
    if (!req.ignore_eos && tok.is_eog(next)) {
      res.finish = FinishReason::kEos;
      break;
    }
    res.tokens.push_back(next);
    sampler.accept(next);
    const std::string piece = out.push(next);
    if (!piece.empty() && on_text && !on_text(piece)) break;
    if (out.stopped()) {
      res.finish = FinishReason::kStop;
      break;
    }
    if (step + 1 == req.max_tokens) break;
    Batch b;
    b.add(next, seq.n_tokens, 0, true);
    HS_RETURN_IF_ERROR(model.forward_copy(b, seqs, kv, pool, logits));
  }
  if (const std::string rest = out.finish(); !rest.empty() && on_text) on_text(rest);
  res.text = std::string(out.released());
  res.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return res;
}

}  // namespace hs
