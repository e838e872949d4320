// app/generate_command.cpp — `hindsight generate -m MODEL -p PROMPT -n N [sampling flags]`.
//
// Encodes the prompt (BOS per the model's metadata, special-token text recognised),
// streams the completion to stdout and prints timings to stderr.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "app/commands.h"
#include "app/loaded_model.h"
#include "engine/generate.h"

namespace hs::app {
namespace {

struct GenerateOptions {
  ModelOptions model;
  std::string prompt;
  int n_predict = 128;
  SamplingOptions sampling;
  bool ignore_eos = false;
  bool quiet = false;
};

int run_generate(GenerateOptions& o) {
  auto sampling = o.sampling.resolve();
  if (!sampling.is_ok()) {
    fmt::print(stderr, "error: {}\n", sampling.status().message());
    return 2;
  }
  auto m = load_model(o.model);
  if (!m.is_ok()) {
    fmt::print(stderr, "error: {}\n", m.status().message());
    return 1;
  }
  GenerateRequest req;
  req.prompt = m->tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/true);
  req.max_tokens = o.n_predict;
  req.sampling = *sampling;
  req.ignore_eos = o.ignore_eos;
  auto res = generate(m->model(), *m->tokenizer, *m->kv, *m->pool, req, [](std::string_view t) {
    fmt::print("{}", t);
    std::fflush(stdout);
    return true;
  });
  fmt::print("\n");
  if (!res.is_ok()) {
    fmt::print(stderr, "error: {}\n", res.status().message());
    return 1;
  }
  if (!o.quiet)
    fmt::print(stderr, "[{} prompt tokens in {:.3f} s = {:.1f} tok/s; {} generated in {:.3f} s = {:.1f} tok/s; finish: {}]\n",
               req.prompt.size(), res->prefill_seconds, req.prompt.size() / std::max(1e-9, res->prefill_seconds),
               res->tokens.size(), res->decode_seconds,
               res->tokens.size() / std::max(1e-9, res->decode_seconds), finish_reason_name(res->finish));
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Complete a prompt and stream the text");
  add_model_options(cmd, o->model);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->check(CLI::Range(0, 1 << 20));
  add_sampling_options(cmd, o->sampling);
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("-q,--quiet", o->quiet, "No timing line on stderr");
  cmd->callback([o, &run] { run = [o] { return run_generate(*o); }; });
}

}  // namespace hs::app
