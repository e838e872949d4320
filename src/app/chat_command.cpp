// app/chat_command.cpp — `hindsight chat -m MODEL`: interactive chat on the terminal.
//
// Each turn renders the whole conversation with the model's chat template (the GGUF's
// tokenizer.chat_template, or the built-in template for its architecture), encodes it
// (special-token text recognised, no extra BOS: templates carry their own), and streams
// the reply. Commands: /reset clears the conversation, /exit (or end of input) quits.
// Each turn re-prefills the conversation; the prefix cache (server issue) will remove that.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/loaded_model.h"
#include "engine/generate.h"
#include "tokenizer/chat_template.h"

namespace hs::app {
namespace {

struct ChatOptions {
  ModelOptions model;
  SamplingOptions sampling;
  std::string system;
  int max_tokens = 512;
};

int run_chat(const ChatOptions& o) {
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
  auto tmpl = chat_template_for_model(m->vocab_file());
  if (!tmpl.is_ok()) {
    fmt::print(stderr, "error: chat template: {}\n", tmpl.status().message());
    return 1;
  }
  const Tokenizer& tok = *m->tokenizer;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  fmt::print(stderr, "hindsight chat — {} ({}); /reset clears, /exit quits\n", o.model.model,
             describe(m->model().config()));
  std::string line;
  while (true) {
    fmt::print("\n> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      messages = nlohmann::ordered_json::array();
      if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    ChatTemplateInputs in;
    in.messages = messages;
    in.add_generation_prompt = true;
    in.bos_token = tok.bos_id() >= 0 ? std::string(tok.token_text(tok.bos_id())) : "";
    in.eos_token = tok.eos_id() >= 0 ? std::string(tok.token_text(tok.eos_id())) : "";
    auto rendered = tmpl->render(in);
    if (!rendered.is_ok()) {
      fmt::print(stderr, "error: chat template: {}\n", rendered.status().message());
      messages.erase(messages.end() - 1);
      continue;
    }
    GenerateRequest req;
    req.prompt = tok.encode(*rendered, /*add_special=*/false, /*parse_special=*/true);
    req.max_tokens = o.max_tokens;
    req.sampling = *sampling;
    auto res = generate(m->model(), tok, *m->kv, *m->pool, req, [](std::string_view t) {
      fmt::print("{}", t);
      std::fflush(stdout);
      return true;
    });
    fmt::print("\n");
    if (!res.is_ok()) {
      fmt::print(stderr, "error: {}\n", res.status().message());
      messages.erase(messages.end() - 1);
      continue;
    }
    messages.push_back({{"role", "assistant"}, {"content", res->text}});
  }
  return 0;
}

}  // namespace

void register_chat(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Interactive chat with streaming output (chat template applied)");
  add_model_options(cmd, o->model);
  add_sampling_options(cmd, o->sampling);
  cmd->add_option("--system", o->system, "System prompt");
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Maximum tokens per reply")->check(CLI::Range(1, 1 << 20));
  cmd->callback([o, &run] { run = [o] { return run_chat(*o); }; });
}

}  // namespace hs::app
