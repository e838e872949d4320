// bench/bench_grammar.cpp — what constrained decoding costs per step (issue 16).
//
// For each model vocabulary found under models/ (SmolLM2 49K tokens, Qwen2.5 151K, Gemma 3
// 262K): the GrammarCompiler's setup (the vocabulary into xgrammar), the compile time of
// json_object and of an agent-style schema (uncached, then cached), and, walking the tokens
// of a valid answer, the time of one step's mask (xgrammar's bitmask + applying it to a
// logits row) and accept. A request without a grammar does none of this (the engine checks
// one null pointer per row). Then tool_choice "auto" (GrammarCompiler::triggered_tool_calls,
// Hermes): the compile (the raw-text vocabulary's setup included on first use) and the mask
// per step over free text followed by a call, split into the text steps and the call steps.
// Prints markdown tables and a JSON line.
// Usage: hs_bench_grammar [--json FILE]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "grammar/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double since_us(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

const char* kSchema = R"({"type": "object", "properties": {
  "file": {"type": "string", "maxLength": 120},
  "edits": {"type": "array", "maxItems": 8, "items": {"type": "object", "properties": {
      "line": {"type": "integer", "minimum": 1},
      "action": {"enum": ["insert", "delete", "replace"]},
      "text": {"type": "string"}},
    "required": ["line", "action"], "additionalProperties": false}},
  "done": {"type": "boolean"}},
  "required": ["file", "edits", "done"], "additionalProperties": false})";
const char* kAnswer =
    R"({"file": "src/engine/engine.cpp", "edits": [{"line": 120, "action": "replace", "text": "  if (s->constraint) s->constraint->mask(row);"}, {"line": 7, "action": "insert", "text": "#include <span>"}], "done": true})";

const char* kAutoAnswer =
    "I will apply the two edits to the engine, then report back.\n\tFirst the include, then the mask call.\n"
    "<tool_call>\n{\"name\": \"edit_file\", \"arguments\": ";

struct Row {
  std::string model;
  int vocab = 0;
  double setup_ms = 0, compile_object_ms = 0, compile_schema_ms = 0, compile_cached_ms = 0;
  int steps = 0;
  double mask_mean_us = 0, mask_p50_us = 0, mask_p99_us = 0, accept_mean_us = 0;
  double auto_compile_ms = 0;  // first triggered grammar: the raw-text vocabulary's setup + compile
  int auto_text_steps = 0, auto_call_steps = 0;
  double auto_text_mean_us = 0, auto_text_p99_us = 0, auto_call_mean_us = 0, auto_call_p99_us = 0;
};

void mean_p99(std::vector<double> v, double& mean, double& p99) {
  double sum = 0;
  for (double x : v) sum += x;
  mean = v.empty() ? 0 : sum / static_cast<double>(v.size());
  std::sort(v.begin(), v.end());
  p99 = v.empty() ? 0 : v[std::min(v.size() - 1, v.size() * 99 / 100)];
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
  const std::filesystem::path models = std::filesystem::path(HS_SOURCE_DIR) / "models";
  std::vector<Row> rows;
  for (const char* file : {"smollm2-135m-instruct-q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                           "gemma-3-270m-q4_k_m.gguf"}) {
    const auto path = models / file;
    if (!std::filesystem::exists(path)) continue;
    auto f = hs::gguf::File::open(path.string());
    if (!f.is_ok()) continue;
    auto tok = hs::make_tokenizer(**f);
    if (!tok.is_ok()) continue;
    Row r;
    r.model = file;
    r.vocab = (*tok)->n_vocab();
    auto t0 = Clock::now();
    hs::grammar::GrammarCompiler gc(**tok, r.vocab);
    r.setup_ms = since_us(t0) / 1e3;
    t0 = Clock::now();
    auto obj = gc.json_object();
    r.compile_object_ms = since_us(t0) / 1e3;
    t0 = Clock::now();
    auto g = gc.json_schema(Json::parse(kSchema));
    r.compile_schema_ms = since_us(t0) / 1e3;
    t0 = Clock::now();
    auto g2 = gc.json_schema(Json::parse(kSchema));
    r.compile_cached_ms = since_us(t0) / 1e3;
    if (!obj.is_ok() || !g.is_ok() || !g2.is_ok()) {
      fmt::print(stderr, "{}: compile failed\n", file);
      return 1;
    }
    std::vector<double> mask_us;
    double accept_us = 0;
    std::vector<float> logits(static_cast<size_t>(r.vocab));
    for (int rep = 0; rep < 5; ++rep) {
      auto c = (*g)->start();
      const std::vector<int32_t> ids = (*tok)->encode(kAnswer, false, false);
      for (size_t k = 0; k < ids.size(); ++k) {
        const int32_t t = ids[k];
        std::fill(logits.begin(), logits.end(), 0.0f);
        t0 = Clock::now();
        c->mask(logits);
        mask_us.push_back(since_us(t0));
        t0 = Clock::now();
        if (!c->accept(t)) {
          fmt::print(stderr, "{}: the valid answer was rejected at token {} after {:?}\n", file, k,
                     (*tok)->decode(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<long>(k) + 1), false));
          return 1;
        }
        accept_us += since_us(t0);
      }
    }
    r.steps = static_cast<int>(mask_us.size());
    r.accept_mean_us = accept_us / r.steps;
    double sum = 0;
    for (double x : mask_us) sum += x;
    r.mask_mean_us = sum / r.steps;
    std::sort(mask_us.begin(), mask_us.end());
    r.mask_p50_us = mask_us[mask_us.size() / 2];
    r.mask_p99_us = mask_us[std::min(mask_us.size() - 1, mask_us.size() * 99 / 100)];

    // tool_choice auto: free text, then the call (its opening, then the same answer as arguments).
    const std::vector<hs::grammar::TriggeredToolCall> tags = {
        {"<tool_call>\n{\"name\": \"edit_file\", \"arguments\": ", Json::parse(kSchema), "}\n</tool_call>"},
        {"<tool_call>\n{\"name\": \"run_tests\", \"arguments\": ", Json{{"type", "object"}}, "}\n</tool_call>"}};
    t0 = Clock::now();
    auto ag = gc.triggered_tool_calls(tags, "<tool_call>", false);
    r.auto_compile_ms = since_us(t0) / 1e3;
    if (!ag.is_ok()) {
      fmt::print(stderr, "{}: auto grammar: {}\n", file, ag.status().message());
      return 1;
    }
    const std::string text = kAutoAnswer;
    const std::vector<int32_t> text_ids = (*tok)->encode(text.substr(0, text.find("<tool_call>")), false, false);
    std::vector<int32_t> ids = text_ids;
    for (int32_t t : (*tok)->encode(text.substr(text.find("<tool_call>")) + kAnswer + "}\n</tool_call>", false, true))
      ids.push_back(t);
    std::vector<double> text_us, call_us;
    for (int rep = 0; rep < 5; ++rep) {
      auto c = (*ag)->start();
      for (size_t k = 0; k < ids.size(); ++k) {
        std::fill(logits.begin(), logits.end(), 0.0f);
        t0 = Clock::now();
        c->mask(logits);
        (k < text_ids.size() ? text_us : call_us).push_back(since_us(t0));
        if (!c->accept(ids[k])) {
          fmt::print(stderr, "{}: auto: the valid answer was rejected at token {}\n", file, k);
          return 1;
        }
      }
    }
    r.auto_text_steps = static_cast<int>(text_us.size());
    r.auto_call_steps = static_cast<int>(call_us.size());
    mean_p99(text_us, r.auto_text_mean_us, r.auto_text_p99_us);
    mean_p99(call_us, r.auto_call_mean_us, r.auto_call_p99_us);
    rows.push_back(r);
  }
  fmt::print("| model | vocab | compiler setup ms | compile json_object ms | compile schema ms | cached ms | steps "
             "| mask mean µs | mask p50 µs | mask p99 µs | accept mean µs |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  Json j = Json::array();
  for (const Row& r : rows) {
    fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.3f} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", r.model, r.vocab,
               r.setup_ms, r.compile_object_ms, r.compile_schema_ms, r.compile_cached_ms, r.steps, r.mask_mean_us,
               r.mask_p50_us, r.mask_p99_us, r.accept_mean_us);
    j.push_back({{"model", r.model}, {"vocab", r.vocab}, {"setup_ms", r.setup_ms},
                 {"compile_json_object_ms", r.compile_object_ms}, {"compile_schema_ms", r.compile_schema_ms},
                 {"compile_cached_ms", r.compile_cached_ms}, {"steps", r.steps}, {"mask_mean_us", r.mask_mean_us},
                 {"mask_p50_us", r.mask_p50_us}, {"mask_p99_us", r.mask_p99_us}, {"accept_mean_us", r.accept_mean_us}});
  }
  fmt::print("\ntool_choice auto (free text, then a call):\n\n| model | first compile ms | text steps | text mask mean µs "
             "| text p99 µs | call steps | call mask mean µs | call p99 µs |\n|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    fmt::print("| {} | {:.1f} | {} | {:.1f} | {:.1f} | {} | {:.1f} | {:.1f} |\n", r.model, r.auto_compile_ms,
               r.auto_text_steps, r.auto_text_mean_us, r.auto_text_p99_us, r.auto_call_steps, r.auto_call_mean_us,
               r.auto_call_p99_us);
    j[i]["auto_compile_ms"] = r.auto_compile_ms;
    j[i]["auto_text_mask_mean_us"] = r.auto_text_mean_us;
    j[i]["auto_text_mask_p99_us"] = r.auto_text_p99_us;
    j[i]["auto_call_mask_mean_us"] = r.auto_call_mean_us;
    j[i]["auto_call_mask_p99_us"] = r.auto_call_p99_us;
  }
  fmt::print("{}\n", j.dump());
  if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
  return rows.empty() ? 1 : 0;
}
