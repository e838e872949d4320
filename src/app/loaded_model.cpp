// app/loaded_model.cpp — see loaded_model.h.
#include "app/loaded_model.h"

#include <CLI/CLI.hpp>

namespace hs::app {

void add_model_options(CLI::App* cmd, ModelOptions& opt) {
  cmd->add_option("-m,--model", opt.model, "GGUF model file")->required();
  cmd->add_option("-c,--ctx-size", opt.ctx_size, "KV cache capacity in tokens")->check(CLI::Range(16, 1 << 22));
  cmd->add_option("-t,--threads", opt.threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024));
  cmd->add_option("--kv-cache-dtype", opt.kv_cache_dtype, "KV cache element type: f16 or f32")
      ->check(CLI::IsMember({"f16", "f32"}))
      ->capture_default_str();
}

void add_sampling_options(CLI::App* cmd, SamplingOptions& o) {
  SamplingParams& p = o.params;
  cmd->add_option("--temp,--temperature", p.temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", p.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", p.top_p, "Nucleus sampling mass (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", p.min_p, "Drop tokens below min-p x the top probability (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", p.repetition_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  cmd->add_option("--presence-penalty", p.presence_penalty, "Presence penalty (-2..2)")->capture_default_str();
  cmd->add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty (-2..2)")->capture_default_str();
  cmd->add_option("-s,--seed", o.seed, "RNG seed (-1 = random)")->capture_default_str();
}

Result<SamplingParams> SamplingOptions::resolve() const {
  SamplingParams p = params;
  if (seed >= 0) p.seed = static_cast<uint64_t>(seed);
  HS_RETURN_IF_ERROR(p.validate());
  return p;
}

Result<LoadedModel> load_model(const ModelOptions& opt) {
  LoadedModel m;
  HS_ASSIGN_OR_RETURN(m.decoder, Decoder::load(opt.model));
  HS_ASSIGN_OR_RETURN(m.tokenizer, make_tokenizer(m.decoder->file()));
  const ModelConfig& c = m.decoder->config();
  if (m.tokenizer->n_vocab() < c.n_vocab)
    return make_error(StatusCode::kCorrupt, "tokenizer has {} tokens but the embedding has {} rows",
                      m.tokenizer->n_vocab(), c.n_vocab);
  HS_ASSIGN_OR_RETURN(KvDtype dtype, parse_kv_dtype(opt.kv_cache_dtype));
  KvGeometry g{c.n_layer, c.n_head_kv, c.head_dim, 16, dtype};
  m.kv = std::make_unique<KvCache>(g, (opt.ctx_size + g.page_tokens - 1) / g.page_tokens);
  m.pool = std::make_unique<ThreadPool>(opt.threads);
  return m;
}

}  // namespace hs::app
