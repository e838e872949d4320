// app/inspect_command.cpp — `hindsight inspect MODEL`: what a GGUF file holds.
//
// Prints the architecture, hyper-parameters, tokenizer summary, chat template and the
// tensor table (name, type, shape, bytes). Reads only the header: cost is independent of
// the model size (the mmap'd data is not touched).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <map>

#include "app/commands.h"
#include "formats/gguf.h"
#include "model/model_config.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hs::app {
namespace {

struct InspectOptions {
  std::string model;
  bool all_metadata = false;
  bool no_tensors = false;
};

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

void print_section(const char* title) { fmt::print("\n## {}\n", title); }

int run_inspect(const InspectOptions& opt) {
  auto file_or = gguf::File::open(opt.model);
  if (!file_or.is_ok()) {
    fmt::print(stderr, "error: {}\n", file_or.status().message());
    return 1;
  }
  const gguf::File& f = **file_or;
  auto arch_or = f.get_string("general.architecture");
  std::string arch = arch_or.is_ok() ? std::string(*arch_or) : "(missing general.architecture)";

  fmt::print("# {}\n", f.path());
  fmt::print("GGUF version {}, {} metadata keys, {} tensors, alignment {}, file {}\n", f.version(),
             f.metadata().size(), f.tensors().size(), f.alignment(), human_bytes(f.file_size()));
  if (auto name = f.get_string("general.name"); name.is_ok()) fmt::print("name: {}\n", *name);
  fmt::print("architecture: {}\n", arch);

  print_section("Model");
  if (auto cfg = load_model_config(f); cfg.is_ok())
    fmt::print("  {}\n", describe(*cfg));
  else
    fmt::print("  not loadable by hindsight: {}\n", cfg.status().message());

  print_section("Hyper-parameters");
  const std::string prefix = arch + ".";
  for (const auto& [key, value] : f.metadata())
    if (key.starts_with(prefix)) fmt::print("  {:<44} {}\n", key.substr(prefix.size()), value.to_display_string());

  print_section("Tokenizer");
  for (const auto& [key, value] : f.metadata())
    if (key.starts_with("tokenizer.") && key != "tokenizer.chat_template")
      fmt::print("  {:<44} {}\n", key.substr(10), value.to_display_string(60));

  if (auto tok = make_tokenizer(f); tok.is_ok()) {
    const Tokenizer& t = **tok;
    auto text = [&](int32_t id) { return id >= 0 ? fmt::format("{} '{}'", id, t.token_text(id)) : std::string("none"); };
    fmt::print("  built: {} tokens ({}), bos {}, eos {}, add_bos {}\n", t.n_vocab(), t.vocab().model_name,
               text(t.bos_id()), text(t.eos_id()), t.add_bos());
    const char* sample = "Hello world! int main() { return 42; } 你好";
    auto ids = t.encode(sample, true, true);
    fmt::print("  encode(\"{}\") = [", sample);
    for (size_t i = 0; i < ids.size(); ++i) fmt::print("{}{}", i ? ", " : "", ids[i]);
    fmt::print("]\n");
  } else {
    fmt::print("  not loadable by hindsight: {}\n", tok.status().message());
  }

  print_section("Chat template");
  std::string origin;
  if (auto tmpl = chat_template_for_model(f, &origin); tmpl.is_ok()) {
    fmt::print("(from {}, {} bytes)\n{}\n", origin, tmpl->source().size(), tmpl->source());
    ChatTemplateInputs in;
    in.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "Hi!"}}});
    in.add_generation_prompt = true;
    if (auto tok = make_tokenizer(f); tok.is_ok()) {
      if ((*tok)->bos_id() >= 0) in.bos_token = std::string((*tok)->token_text((*tok)->bos_id()));
      if ((*tok)->eos_id() >= 0) in.eos_token = std::string((*tok)->token_text((*tok)->eos_id()));
    }
    if (auto r = tmpl->render(in); r.is_ok())
      fmt::print("\nrendered for [user: \"Hi!\"] + generation prompt:\n{}\n", *r);
    else
      fmt::print("\nrendering failed: {}\n", r.status().message());
  } else {
    fmt::print("(none: {})\n", tmpl.status().message());
  }

  if (opt.all_metadata) {
    print_section("All metadata");
    for (const auto& [key, value] : f.metadata()) fmt::print("  {:<52} {}\n", key, value.to_display_string());
  }

  print_section("Tensors");
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t total_bytes = 0, total_params = 0;
  for (const auto& t : f.tensors()) {
    auto& e = by_type[std::string(dtype_name(t.type))];
    e.first += 1;
    e.second += t.n_bytes;
    total_bytes += t.n_bytes;
    total_params += static_cast<uint64_t>(t.n_elements());
    if (!opt.no_tensors)
      fmt::print("  {:<36} {:<6} {:<22} {:>12}\n", t.name, dtype_name(t.type), t.shape_string(),
                 human_bytes(t.n_bytes));
  }
  fmt::print("  by type:");
  for (const auto& [name, e] : by_type) fmt::print(" {} x{} ({})", name, e.first, human_bytes(e.second));
  fmt::print("\n  total: {} parameters, {}\n", total_params, human_bytes(total_bytes));
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show a model file's architecture, hyper-parameters, tokenizer, chat template and tensors");
  cmd->add_option("model", opt->model, "GGUF model file")->required();
  cmd->add_flag("--all-metadata", opt->all_metadata, "Also print every metadata key");
  cmd->add_flag("--no-tensors", opt->no_tensors, "Skip the per-tensor table (keep the summary)");
  cmd->callback([opt, &run] { run = [opt] { return run_inspect(*opt); }; });
}

}  // namespace hs::app
