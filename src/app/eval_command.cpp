// app/eval_command.cpp — `hindsight eval needle`: needle-in-a-haystack recall, dense vs sparse.
//
// A haystack of real text (--haystack: the prose docs found on the machine, or a source tree
// — the C/C++ headers of /usr/include, the Python standard library — each in a fixed hashed
// order; or the --corpus files) is cut to the requested context length and N needles are
// placed at depths spread over 0–100%. Prose needles are unique facts "The special magic
// number for <name> is <7 digits>."; code needles (code haystacks) are near-duplicate lines
// of code, one per name, differing only in the name and the digits
// ("constexpr long kMagicNumberBergen = 4823917;" in C/C++, "MAGIC_NUMBER_BERGEN = 4823917"
// in Python), placed at line ends: the seeds' known failure is mixing such lines up. Each
// needle is asked for through the model's chat template ("What is the special magic number
// for <name>?" / "What is the value of kMagicNumberBergen in the code above?"), answered
// greedily, and scored exactly (the digits appear in the answer). The haystack is prefilled once (dense; its KV does not depend on the decode
// mode) and shared by every question through ref-counted pages. Each question's tokens are
// then prefilled as one batch (--question prefill, the default: dense attention, as a
// follow-up prompt gets in serving and as Quest / ShadowKV evaluate) or fed one decode step
// per token (--question decode: every question token attends sparsely too, a harsher test
// whose errors compound in the question's KV); every answer token is a sparse decode step.
// Configurations: dense, then each selector (sketch, quest) at each budget. For the sparse
// ones the attention-mass recall per layer (share of the dense softmax mass on the selected
// tokens) is averaged over all steps, next to two oracle ceilings of the same steps and budget
// (oracle_mass_recall: chunks ranked by the exact max logit from the real KV — the selector's
// rule with a perfect sketch — and by their exact softmax mass — the best selection of that
// size). "Same answer as dense" counts the questions whose whole answer equals the dense
// configuration's and "same number as dense" those whose first 7+-digit number equals dense's
// (answers run on after the number, so whole answers rarely match): fidelity to dense, which
// still means something where the model itself fails the task (Gemma 3 270M at 32K repeats a
// few of the numbers for most questions).
// On --device cuda the haystack is prefilled without the key observer and each sketch
// configuration's device sketches are rebuilt from its KV pages when attached
// (Backend::rebuild_sparse_metadata); the GPU selector is the sketch (max rule over pages) and
// records no attention masses, so its recall columns say n/a.
// Prints a markdown table and JSON (--json).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <regex>
#include <sstream>

#include <xxhash.h>

#include "app/commands.h"
#include "app/loaded_model.h"
#include "tokenizer/chat_template.h"

namespace hs::app {
namespace {

struct EvalOptions {
  ModelOptions model;
  std::vector<std::string> corpus;
  std::vector<std::string> haystacks{"docs"};  // docs | include | python (ignored with --corpus)
  std::string needle_kind = "auto";            // auto | prose | code | c++ | python
  std::string export_dir;                      // write each haystack's text here and stop
  std::vector<int> contexts{8192};
  int n_needles = 32;
  std::vector<int> budgets{512, 1024, 2048};
  std::vector<std::string> selectors{"sketch", "quest"};
  int max_answer_tokens = 32;
  uint64_t seed = 7;
  std::string json_path;
  bool verbose = false;
  std::string question_mode = "prefill";  // prefill | decode (how the question tokens are fed)
};

// The built-in haystacks, each a tree found on the machine with the files kept in an order
// fixed by a hash of each path, so the first megabytes (all a 32K-token case reads) mix many
// packages or modules. Not this repository's files: they change with every commit, and the
// haystack (so every figure) with them.
//   docs:    the prose of /usr/share/doc (.md and .txt: package docs, release notes);
//   include: C and C++ headers, /usr/include (.h, .hpp);
//   python:  the Python standard library, /usr/lib/python3.* (.py, tests excluded).
struct Haystack {
  const char* name;
  const char* language;  // "" (prose), "c++" or "python": which code needles fit
};
constexpr Haystack kHaystacks[] = {{"docs", ""}, {"include", "c++"}, {"python", "python"}};

const Haystack* find_haystack(const std::string& name) {
  for (const Haystack& h : kHaystacks)
    if (name == h.name) return &h;
  return nullptr;
}

std::vector<std::string> haystack_files(const std::string& name) {
  std::vector<std::string> roots;
  std::vector<std::string> exts;
  if (name == "docs") {
    roots = {"/usr/share/doc"};
    exts = {".md", ".txt"};
  } else if (name == "include") {
    roots = {"/usr/include"};
    exts = {".h", ".hpp"};
  } else {  // python
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/usr/lib", ec))
      if (e.is_directory() && e.path().filename().string().rfind("python3.", 0) == 0) roots.push_back(e.path().string());
    exts = {".py"};
  }
  std::vector<std::pair<uint64_t, std::string>> files;
  for (const auto& root : roots) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      const auto& p = it->path();
      const std::string path = p.string();
      if (name == "python" && (path.find("/test") != std::string::npos || path.find("site-packages") != std::string::npos ||
                               path.find("dist-packages") != std::string::npos))
        continue;
      if (it->is_regular_file() && std::find(exts.begin(), exts.end(), p.extension().string()) != exts.end())
        files.emplace_back(XXH3_64bits(path.data(), path.size()), path);
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (auto& f : files) out.push_back(std::move(f.second));
  return out;
}

// How a needle reads and how it is asked for. Prose: a sentence; code: a line of code in the
// haystack's language, every needle the same line but for the name and the digits.
struct NeedleStyle {
  std::string language;  // "" = prose
  std::string line(const std::string& name, const std::string& value) const {
    if (language == "c++") return fmt::format("constexpr long kMagicNumber{} = {};", name, value);
    if (language == "python") return fmt::format("MAGIC_NUMBER_{} = {}", upper(name), value);
    return fmt::format("The special magic number for {} is {}.", name, value);
  }
  std::string question_marker() const {
    return language.empty() ? "\n\nQuestion: What is the special magic number for " : "\n\nQuestion: What is the value of ";
  }
  std::string question_rest(const std::string& name) const {
    if (language == "c++") return fmt::format("kMagicNumber{} in the code above? Answer with the number only.", name);
    if (language == "python") return fmt::format("MAGIC_NUMBER_{} in the code above? Answer with the number only.", upper(name));
    return name + "? Answer with the number only.";
  }
  static std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }
};

// The text a haystack's files give, read in order until it can fill `max_ctx` tokens many
// times over (a few MB), each file followed by a newline.
std::string read_haystack_text(const std::vector<std::string>& files, int max_ctx) {
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text += ss.str();
    text += "\n";
    if (text.size() > static_cast<size_t>(max_ctx) * 8 + (1 << 20)) break;
  }
  return text;
}

struct Needle {
  std::string name, value;
  double depth;
};

struct Case {
  std::vector<int32_t> prefix;                  // haystack part, a multiple of the page size
  std::vector<std::vector<int32_t>> questions;  // per needle: the rest of the prompt
  std::vector<Needle> needles;
};

Result<Case> build_case(LoadedModel& m, const ChatTemplate& tmpl, const std::vector<int32_t>& corpus_tokens,
                        int context, int n_needles, const NeedleStyle& style, std::mt19937_64& rng) {
  const Tokenizer& tok = *m.tokenizer;
  static const char* kNames[] = {"Amsterdam", "Bergen",  "Cordoba", "Dakar",   "Esbjerg", "Fresno",  "Gdansk",
                                 "Hanoi",     "Izmir",   "Jaipur",  "Kyoto",   "Lagos",   "Malmo",   "Nantes",
                                 "Oaxaca",    "Porto",   "Quito",   "Riga",    "Sapporo", "Tampere", "Utrecht",
                                 "Valencia",  "Windhoek", "Xiamen", "Yerevan", "Zagreb",  "Aarhus",  "Bilbao",
                                 "Cusco",     "Dublin",  "Eindhoven", "Florence", "Geneva", "Hobart", "Innsbruck",
                                 "Jena",      "Kazan",   "Lyon",    "Minsk",   "Nagoya"};
  const int n_names = static_cast<int>(std::size(kNames));
  if (n_needles > n_names) return make_error(StatusCode::kInvalidArgument, "at most {} needles", n_names);
  Case cs;
  std::vector<int> order(n_names);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> digits(1000000, 9999999);
  for (int i = 0; i < n_needles; ++i)
    cs.needles.push_back({kNames[order[i]], std::to_string(digits(rng)),
                          n_needles == 1 ? 0.5 : static_cast<double>(i) / (n_needles - 1)});
  // Haystack tokens: leave room for the needles, the template and the question.
  const int reserve = 30 * n_needles + 120;
  const int n_hay = context - reserve;
  if (n_hay < 256 || static_cast<int>(corpus_tokens.size()) < n_hay)
    return make_error(StatusCode::kInvalidArgument, "corpus has {} tokens, the {}-token context needs {}",
                      corpus_tokens.size(), context, n_hay);
  const size_t offset = std::uniform_int_distribution<size_t>(0, corpus_tokens.size() - n_hay)(rng);
  std::string hay;
  int prev = 0;
  for (const Needle& nd : cs.needles) {
    int at = std::max(prev, static_cast<int>(nd.depth * n_hay));
    // A code needle is a line of its own: move the cut to the end of the line (at most 64
    // tokens on; the haystack's length does not change, only where the needles sit).
    if (!style.language.empty())
      for (int k = 0; k < 64 && at > prev && at < n_hay; ++k, ++at) {
        const std::vector<int32_t> one{corpus_tokens[offset + at - 1]};
        if (tok.decode(one, true).find('\n') != std::string::npos) break;
      }
    std::vector<int32_t> seg(corpus_tokens.begin() + offset + prev, corpus_tokens.begin() + offset + at);
    hay += tok.decode(seg, true);
    if (!hay.empty() && hay.back() != '\n') hay += '\n';
    hay += style.line(nd.name, nd.value) + "\n";
    prev = at;
  }
  std::vector<int32_t> seg(corpus_tokens.begin() + offset + prev, corpus_tokens.begin() + offset + n_hay);
  hay += tok.decode(seg, true);

  const std::string marker = style.question_marker();
  std::string prefix_text;
  for (size_t i = 0; i < cs.needles.size(); ++i) {
    ChatTemplateInputs in;
    in.messages = nlohmann::ordered_json::array(
        {{{"role", "user"},
          {"content", hay + marker + style.question_rest(cs.needles[i].name)}}});
    in.add_generation_prompt = true;
    in.bos_token = tok.bos_id() >= 0 ? std::string(tok.token_text(tok.bos_id())) : "";
    HS_ASSIGN_OR_RETURN(std::string text, tmpl.render(in));
    const size_t cut = text.rfind(marker);
    if (i == 0) {
      prefix_text = text.substr(0, cut);
      cs.prefix = tok.encode(prefix_text, false, true);
    }
    std::vector<int32_t> q = tok.encode(text.substr(cut), false, true);
    cs.questions.push_back(std::move(q));
  }
  // Page-align the shared prefix; the tail moves into every question.
  const size_t aligned = cs.prefix.size() / 16 * 16;
  std::vector<int32_t> tail(cs.prefix.begin() + aligned, cs.prefix.end());
  cs.prefix.resize(aligned);
  for (auto& q : cs.questions) q.insert(q.begin(), tail.begin(), tail.end());
  return cs;
}

struct ConfigResult {
  std::string name;
  int correct = 0, total = 0;
  int same_as_dense = 0;       // answers identical to the dense configuration's (fidelity)
  int same_number_as_dense = 0;  // answers whose first number (7+ digits; none counts as "") is dense's
  std::vector<std::string> answers;  // [n_needles]
  std::vector<double> recall;  // [n_layer]
  std::vector<OracleRecall> oracle;  // [n_layer]
  double seconds = 0;
  SparseStats stats;           // sparse configurations: selection and device-tier counters
};

// The first run of 7 or more digits in an answer ("" if none): the number it gives, for the
// "same number as dense" fidelity count (answers often run on after the number).
std::string first_number(const std::string& answer) {
  static const std::regex kNumber(R"(\d{7,})");
  std::smatch m;
  return std::regex_search(answer, m, kNumber) ? m.str() : std::string();
}

// Feeds the question and generates the answer one token per step on a fork of `hay` (a hybrid
// model's recurrent state: restored from the haystack's checkpoint `hay_state`).
Result<std::string> ask(LoadedModel& m, const SeqKv& hay, uint64_t hay_state, const std::vector<int32_t>& question,
                        int max_tokens, bool measure_recall, bool question_as_prefill) {
  SeqKv seq;
  seq.blocks = hay.blocks;
  for (int32_t b : seq.blocks) m.kv->pool().retain(b);
  seq.n_tokens = hay.n_tokens;
  SeqKv* seqs[] = {&seq};
  struct Release { KvCache& kv; SeqKv& s; ~Release() { kv.release(s); } } rel{*m.kv, seq};
  if (m.states) HS_RETURN_IF_ERROR(m.states->restore(hay_state, seq));
  LanguageModel& model = m.model();
  std::vector<float> logits;
  const int V = model.config().n_vocab;
  if (question_as_prefill) {  // one prefill batch: dense attention, as a follow-up prompt gets in serving
    Batch b;
    for (size_t i = 0; i < question.size(); ++i)
      b.add(question[i], seq.n_tokens + static_cast<int32_t>(i), 0, i + 1 == question.size());
    HS_RETURN_IF_ERROR(model.forward_copy(b, seqs, *m.kv, *m.pool, logits));
  } else {  // one decode step per token: every question token attends sparsely too
    for (int32_t t : question) {
      Batch b;
      b.add(t, seq.n_tokens, 0, true);
      HS_RETURN_IF_ERROR(model.forward_copy(b, seqs, *m.kv, *m.pool, logits));
    }
  }
  // Recall is measured on the answer tokens (the steps that retrieve), not while the
  // question is fed: the dense reference costs O(context) per step.
  if (SparseRuntime* sp = model.sparse()) sp->set_measure_recall(measure_recall);
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
    if (m.tokenizer->is_eog(next)) break;
    out.push_back(next);
    Batch b;
    b.add(next, seq.n_tokens, 0, true);
    HS_RETURN_IF_ERROR(model.forward_copy(b, seqs, *m.kv, *m.pool, logits));
  }
  if (SparseRuntime* sp = model.sparse()) sp->set_measure_recall(false);
  return m.tokenizer->decode(out, true);
}

// A --selectors entry: a selector (sketch, quest, oracle) with optional "+" modifiers that
// override the model flags for this configuration only: "mass" (--sparse-chunk-score mass),
// "max", "rerankR" (--sparse-rerank R), "norerank", "resZ" (--sparse-residual Z), "f16" / "int8"
// (--sketch-dtype), "pagesN" (--sparse-page-shortlist N: page bounds first, the N best pages
// scored). E.g. "sketch+mass", "sketch+rerank4", "sketch+f16+res2", "sketch+max+rerank8+pages1536".
Status apply_selector_spec(const std::string& spec, ModelOptions& mo) {
  size_t at = spec.find('+');
  mo.sparse = spec.substr(0, at);
  if (mo.sparse != "sketch" && mo.sparse != "quest" && mo.sparse != "oracle")
    return make_error(StatusCode::kInvalidArgument, "--selectors '{}': unknown selector '{}' (sketch, quest, oracle)",
                      spec, mo.sparse);
  while (at != std::string::npos) {
    const size_t next = spec.find('+', at + 1);
    const std::string mod = spec.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    at = next;
    if (mod == "mass" || mod == "max") {
      mo.chunk_score = mod;
    } else if (mod == "f16" || mod == "int8") {
      mo.sketch_dtype = mod;
    } else if (float z = 0.0f; mod.rfind("res", 0) == 0 && mod.size() > 3 && mod.size() <= 7 &&
               std::from_chars(mod.data() + 3, mod.data() + mod.size(), z).ptr == mod.data() + mod.size() &&
               z >= 0.0f && z <= 16.0f) {
      mo.sparse_cfg.residual_z = z;
    } else if (int n = 0; mod.rfind("pages", 0) == 0 && mod.size() > 5 && mod.size() <= 12 &&
               std::from_chars(mod.data() + 5, mod.data() + mod.size(), n).ptr == mod.data() + mod.size() &&
               n >= 0) {
      mo.sparse_page_shortlist = n;
    } else if (mod == "norerank") {
      mo.sparse_rerank = "0";
    } else if (mod.rfind("rerank", 0) == 0 && mod.size() > 6 && mod.size() <= 8 &&
               std::all_of(mod.begin() + 6, mod.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      mo.sparse_rerank = mod.substr(6);
    } else {
      return make_error(StatusCode::kInvalidArgument,
                        "--selectors '{}': unknown modifier '{}' (mass, max, rerankR, norerank, resZ, f16, int8, pagesN)", spec,
                        mod);
    }
  }
  return Status::ok();
}

int run_needle(EvalOptions& o) {
  int max_ctx = 0;
  for (int c : o.contexts) max_ctx = std::max(max_ctx, c);
  o.model.ctx_size = std::max(o.model.ctx_size, max_ctx + 64 * 16 + 1024);
  if (!o.export_dir.empty()) {  // the exact haystack texts, for a run elsewhere with --corpus
    std::filesystem::create_directories(o.export_dir);
    for (const std::string& h : o.haystacks) {
      const std::string path = (std::filesystem::path(o.export_dir) / (h + ".txt")).string();
      std::ofstream(path, std::ios::binary) << read_haystack_text(haystack_files(h), max_ctx);
      fmt::print("{}\n", path);
    }
    return 0;
  }
  o.model.sparse = "off";  // runtimes are built per configuration below
  auto m = load_model(o.model);
  if (!m.is_ok()) { fmt::print(stderr, "error: {}\n", m.status().message()); return 1; }
  LanguageModel& model = m->model();
  // Hybrid models: one checkpoint of the recurrent state, the haystack's, that every question's
  // fork starts from.
  if (Status st = remake_state_pool(*m, kDefaultResidentSeqs, 1); !st.is_ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  uint64_t hay_state = 0;  // the checkpoint key of the current haystack's state (a new one per case)
  auto tmpl = chat_template_for_model(m->vocab_file());
  if (!tmpl.is_ok()) { fmt::print(stderr, "error: {}\n", tmpl.status().message()); return 1; }
  // One device tier for every sparse configuration (they share the chunk size). Each
  // question's fork ends with KvCache::release, which ends its lease and frees its slots.
  if (Status st = attach_device_tier(o.model, *m, resolved_sparse_config(o.model, *m->kv)); !st.is_ok()) {
    fmt::print(stderr, "error: {}\n", st.message());
    return 1;
  }
  // The haystacks of this run: the --corpus files (one haystack), else each --haystack.
  // A --corpus haystack is named after its first file's stem ("include.txt" → include).
  std::vector<std::string> hay_names =
      o.corpus.empty() ? o.haystacks : std::vector<std::string>{std::filesystem::path(o.corpus.front()).stem().string()};

  nlohmann::ordered_json j;
  j["model"] = model_display_name(o.model);
  j["needles"] = o.n_needles;
  j["contexts"] = nlohmann::ordered_json::array();
  fmt::print("\n| haystack | context | attention | selector | budget | correct | accuracy | same answer as dense | same number as dense | mean mass recall "
             "| min layer recall | mass recall per layer | oracle (exact max) per layer | oracle (mass) per layer | s |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& hay_name : hay_names) {
    const Haystack* known = o.corpus.empty() ? find_haystack(hay_name) : nullptr;
    const std::vector<std::string> files = o.corpus.empty() ? haystack_files(hay_name) : o.corpus;
    if (files.empty()) { fmt::print(stderr, "error: haystack '{}': no files found on this machine\n", hay_name); return 1; }
    NeedleStyle style;
    if (o.needle_kind == "code") style.language = known && known->language[0] ? known->language : "c++";
    if (o.needle_kind == "c++" || o.needle_kind == "python") style.language = o.needle_kind;
    if (o.needle_kind == "auto" && known) style.language = known->language;
    const std::string text = read_haystack_text(files, max_ctx);
    const std::vector<int32_t> corpus_tokens = m->tokenizer->encode(text, false, false);
    spdlog::info("eval needle: haystack {}: {} files, {} tokens read, {} needles", hay_name, files.size(),
                 corpus_tokens.size(), style.language.empty() ? "prose" : style.language + " code");
    for (int context : o.contexts) {
      // Per (haystack, context): adding a haystack or a context changes no other case (a run of
      // --context 16384 32768 asks at 32K what a run of --context 32768 asks).
      std::mt19937_64 rng(o.seed);
      auto cs = build_case(*m, *tmpl, corpus_tokens, context, o.n_needles, style, rng);
      if (!cs.is_ok()) { fmt::print(stderr, "error: {}\n", cs.status().message()); return 1; }
      // Prefill the shared haystack once (dense).
      SeqKv hay;
      SeqKv* seqs[] = {&hay};
      std::vector<float> logits;
      const auto t0 = std::chrono::steady_clock::now();
      // The sparse configurations need the haystack's sketch / Quest metadata: prefill with each
      // runtime attached (their on_key hooks run; prefill itself stays dense).
      std::vector<std::pair<std::string, std::unique_ptr<SparseRuntime>>> runtimes;
      for (const auto& sel : o.selectors)
        for (int budget : o.budgets) {
          ModelOptions mo = o.model;
          if (Status st = apply_selector_spec(sel, mo); !st.is_ok()) {
            fmt::print(stderr, "error: {}\n", st.message());
            return 1;
          }
          mo.sparse_cfg.budget_tokens = budget;
          mo.sparse_min_context = 0;  // every question and answer token attends sparsely
          auto rt = make_sparse_runtime(mo, *m);  // over the shared model, no reload
          if (!rt.is_ok()) { fmt::print(stderr, "error: {}\n", rt.status().message()); return 1; }
          runtimes.emplace_back(fmt::format("{}@{}", sel, budget), std::move(*rt));
        }
      // A fan-out observer: every runtime records the haystack's keys (CPU). On a GPU each
      // configuration's sketches are rebuilt from the haystack's KV pages when it is attached.
      const bool on_cpu = model.device() == Device::kCpu;
      model.set_sparse(nullptr);
      if (on_cpu) model.set_key_observer(
          [&](int layer, const float*, const float* k_post, const float*, const float* v, int64_t n) {
            const ModelConfig& c = model.config();
            for (auto& [name, rt] : runtimes)
              if (rt->layer_sparse(layer))
                for (int64_t t = 0; t < n; ++t)
                  for (int h = 0; h < c.n_head_kv; ++h) {
                    const int64_t off = t * c.kv_dim() + h * c.head_dim;
                    rt->on_key(hay.blocks, layer, h, hay.n_tokens + static_cast<int32_t>(t), k_post + off, v + off);
                  }
          });
      for (size_t s = 0; s < cs->prefix.size(); s += 512) {
        Batch b;
        for (size_t p = s; p < std::min(cs->prefix.size(), s + 512); ++p) b.add(cs->prefix[p], static_cast<int32_t>(p), 0, false);
        Status st = m->kv->reserve(hay, static_cast<int32_t>(s + b.size()));
        if (st.is_ok()) st = model.forward_copy(b, seqs, *m->kv, *m->pool, logits);
        if (!st.is_ok()) { fmt::print(stderr, "error: {}\n", st.message()); return 1; }
      }
      model.set_key_observer({});
      if (m->states) {
        auto saved = m->states->save(hay, ++hay_state);
        if (!saved.is_ok()) { fmt::print(stderr, "error: {}\n", saved.status().message()); return 1; }
      }
      const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      spdlog::info("context {}: haystack {} tokens prefilled in {:.1f} s", context, hay.n_tokens, prefill_s);

      nlohmann::ordered_json jc;
      jc["haystack"] = hay_name;
      jc["needle_kind"] = style.language.empty() ? "prose" : style.language;
      jc["context"] = context;
      jc["haystack_tokens"] = hay.n_tokens;
      jc["configs"] = nlohmann::ordered_json::array();
      auto run_config = [&](const std::string& name, SparseRuntime* rt) -> Result<ConfigResult> {
        ConfigResult r;
        r.name = name;
        model.set_sparse(rt);
        if (rt && !on_cpu) HS_RETURN_IF_ERROR(model.rebuild_sparse_metadata(*m->kv, hay, hay.n_tokens));
        if (rt) rt->reset_stats();
        const auto c0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < cs->needles.size(); ++i) {
          HS_ASSIGN_OR_RETURN(std::string ans, ask(*m, hay, hay_state, cs->questions[i], o.max_answer_tokens, rt != nullptr,
                                                      o.question_mode == "prefill"));
          const bool ok = ans.find(cs->needles[i].value) != std::string::npos;
          if (o.verbose) fmt::print(stderr, "[{}] {} → expected {}, got {:?}\n", name, cs->needles[i].name,
                                    cs->needles[i].value, ans);
          r.correct += ok;
          ++r.total;
          r.answers.push_back(ans);
        }
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
        if (rt) {
          r.recall = rt->recall_per_layer();
          r.oracle = rt->oracle_recall_per_layer();
          rt->set_measure_recall(false);
          r.stats = rt->stats();
        }
        model.set_sparse(nullptr);
        return r;
      };
      std::vector<ConfigResult> results;
      {
        auto r = run_config("dense", nullptr);
        if (!r.is_ok()) { fmt::print(stderr, "error: {}\n", r.status().message()); return 1; }
        results.push_back(std::move(*r));
      }
      for (auto& [name, rt] : runtimes) {
        auto r = run_config(name, rt.get());
        if (!r.is_ok()) { fmt::print(stderr, "error: {}\n", r.status().message()); return 1; }
        results.push_back(std::move(*r));
      }
      for (auto& r : results)
        for (size_t i = 0; i < r.answers.size(); ++i) {
          r.same_as_dense += r.answers[i] == results.front().answers[i];
          r.same_number_as_dense += first_number(r.answers[i]) == first_number(results.front().answers[i]);
        }
      for (const auto& r : results) {
        double mean = 0, mn = 1;
        int nl = 0;
        for (double x : r.recall)
          if (!std::isnan(x)) { mean += x; mn = std::min(mn, x); ++nl; }
        const bool sparse = r.name != "dense";
        const bool measured = nl > 0;  // not on a GPU: it records no attention masses
        const std::string none = sparse ? "n/a" : "1";
        const auto at = r.name.find('@');
        // The measured layers' values, "a / b / c".
        auto per_layer = [&](auto value) {
          std::string out;
          for (size_t l = 0; l < r.recall.size(); ++l)
            if (!std::isnan(r.recall[l])) out += fmt::format("{}{:.3f}", out.empty() ? "" : " / ", value(l));
          return measured ? out : none;
        };
        fmt::print("| {} | {} | {} | {} | {} | {}/{} | {:.3f} | {}/{} | {}/{} | {} | {} | {} | {} | {} | {:.1f} |\n", hay_name, context,
                   sparse ? "sparse" : "dense", sparse ? r.name.substr(0, at) : "-", sparse ? r.name.substr(at + 1) : "-",
                   r.correct, r.total, static_cast<double>(r.correct) / r.total, r.same_as_dense, r.total,
                   r.same_number_as_dense, r.total,
                   measured ? fmt::format("{:.4f}", mean / nl) : none, measured ? fmt::format("{:.4f}", mn) : none,
                   per_layer([&](size_t l) { return r.recall[l]; }),
                   per_layer([&](size_t l) { return r.oracle[l].exact_max; }),
                   per_layer([&](size_t l) { return r.oracle[l].mass; }), r.seconds);
        std::fflush(stdout);  // each row as it is measured: a long run stopped midway keeps what it did
        nlohmann::ordered_json jr{{"config", r.name},     {"correct", r.correct},         {"total", r.total},
                                  {"same_as_dense", r.same_as_dense}, {"same_number_as_dense", r.same_number_as_dense},
                                  {"seconds", r.seconds}};
        auto json_layers = [](const std::vector<double>& v) {
          nlohmann::ordered_json a = nlohmann::ordered_json::array();
          for (double x : v) a.push_back(std::isnan(x) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(x));
          return a;
        };
        std::vector<double> o_max, o_mass;
        for (const OracleRecall& o : r.oracle) { o_max.push_back(o.exact_max); o_mass.push_back(o.mass); }
        jr["mass_recall_per_layer"] = json_layers(r.recall);
        jr["oracle_max_recall_per_layer"] = json_layers(o_max);
        jr["oracle_mass_recall_per_layer"] = json_layers(o_mass);
        if (r.stats.fetch_hits + r.stats.fetch_misses > 0)
          jr["device_tier"] = {{"hits", r.stats.fetch_hits}, {"misses", r.stats.fetch_misses},
                               {"bytes", r.stats.fetch_bytes}, {"evictions", r.stats.fetch_evictions},
                               {"refused", r.stats.fetch_refused}};
        jc["configs"].push_back(jr);
      }
      j["contexts"].push_back(jc);
      m->kv->release(hay);
    }
  }
  fmt::print("\n{}\n", j.dump());
  if (!o.json_path.empty()) std::ofstream(o.json_path) << j.dump(2) << "\n";
  return 0;
}

}  // namespace

void register_eval(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* ev = app.add_subcommand("eval", "Quality evaluations");
  ev->require_subcommand(1);
  CLI::App* cmd = ev->add_subcommand("needle", "Needle-in-a-haystack recall: dense vs sparse selectors and budgets");
  add_model_options(cmd, o->model);
  cmd->add_option("--corpus", o->corpus, "Haystack text files, in this order (instead of --haystack)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--haystack", o->haystacks,
                  "Built-in haystacks, each a tree on this machine in a fixed hashed file order: docs (the .md/.txt "
                  "prose of /usr/share/doc), include (C/C++ headers of /usr/include), python (the Python standard "
                  "library)")
      ->check(CLI::IsMember({"docs", "include", "python"}))
      ->capture_default_str();
  cmd->add_option("--needle-kind", o->needle_kind,
                  "Needles: prose (\"The special magic number for X is N.\"), code (near-duplicate lines of code, "
                  "one per name: \"constexpr long kMagicNumberX = N;\", in Python \"MAGIC_NUMBER_X = N\"; "
                  "c++ / python pick the language for a --corpus), or auto (code in the code haystacks, prose in "
                  "docs and --corpus)")
      ->check(CLI::IsMember({"auto", "prose", "code", "c++", "python"}))
      ->capture_default_str();
  cmd->add_option("--context", o->contexts, "Context lengths in tokens")->capture_default_str();
  cmd->add_option("--needles", o->n_needles, "Needles per context (unique facts)")->capture_default_str();
  cmd->add_option("--budgets", o->budgets, "Sparse budgets in tokens")->capture_default_str();
  cmd->add_option("--selectors", o->selectors, "Selectors: sketch, quest, oracle (the best selection of the budget, from the exact keys); "
                  "'+' modifiers override the model flags for one configuration: +mass, +max (chunk score), "
                  "+rerankR, +norerank, +resZ (--sparse-residual Z), +f16, +int8 (sketch dtype), +pagesN "
                  "(--sparse-page-shortlist N) (e.g. sketch+mass, sketch+rerank4, sketch+f16+res2)")
      ->capture_default_str();
  cmd->add_option("--question", o->question_mode,
                  "How each question's tokens are fed: prefill (one dense prefill batch, as a follow-up prompt is "
                  "in serving; the answer is decoded sparsely) or decode (one sparse decode step per token)")
      ->check(CLI::IsMember({"prefill", "decode"}))
      ->capture_default_str();
  cmd->add_option("--export-haystacks", o->export_dir,
                  "Write each --haystack's text (as read for the largest --context) to DIR/<haystack>.txt and stop: "
                  "the same haystack on another machine with --corpus DIR/<haystack>.txt --needle-kind ...");
  cmd->add_option("--answer-tokens", o->max_answer_tokens, "Answer length cap")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Needle placement seed")->capture_default_str();
  cmd->add_option("--json", o->json_path, "Also write the JSON result here");
  cmd->add_flag("-v,--verbose", o->verbose, "Print every answer");
  cmd->callback([o, &run] { run = [o] { return run_needle(*o); }; });
}

}  // namespace hs::app
