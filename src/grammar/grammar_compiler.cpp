// grammar/grammar_compiler.cpp — see grammar_compiler.h. xgrammar stays behind this file:
// nothing else includes its headers.
#include "grammar/grammar_compiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <variant>

#include <xgrammar/xgrammar.h>

#include "grammar/schema_support.h"
#include "tokenizer/tokenizer.h"

namespace hs::grammar {
namespace {

using Json = nlohmann::ordered_json;

// At most this many whitespace characters in a row between JSON tokens: the grammar allows
// pretty and compact output but a model cannot stall in an endless run of spaces.
constexpr int kMaxWhitespace = 16;

// One choice's matcher and its bitmask buffer [ceil(n_vocab / 32)] int32 words.
class XgrammarConstraint final : public TokenConstraint {
 public:
  XgrammarConstraint(const xgrammar::CompiledGrammar& g, int n_vocab)
      : matcher_(g), n_vocab_(n_vocab), words_(static_cast<size_t>(xgrammar::GetBitmaskSize(n_vocab)), 0) {}

  void mask(std::span<float> logits) override {
    int64_t shape[1] = {static_cast<int64_t>(words_.size())};
    DLTensor t{};
    t.data = words_.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    if (!matcher_.FillNextTokenBitmask(&t)) return;  // every token allowed
    const int n = std::min<int>(n_vocab_, static_cast<int>(logits.size()));
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (int w = 0; w * 32 < n; ++w) {
      const uint32_t bits = static_cast<uint32_t>(words_[static_cast<size_t>(w)]);
      if (bits == 0xffffffffu) continue;
      const int end = std::min(n, w * 32 + 32);
      for (int i = w * 32; i < end; ++i)
        if (!((bits >> (i - w * 32)) & 1u)) logits[static_cast<size_t>(i)] = kNegInf;
    }
    for (size_t i = static_cast<size_t>(n); i < logits.size(); ++i) logits[i] = kNegInf;
  }
  bool accept(int32_t token) override { return matcher_.AcceptToken(token); }
  bool terminated() const override { return matcher_.IsTerminated(); }

 private:
  xgrammar::GrammarMatcher matcher_;
  int n_vocab_;
  std::vector<int32_t> words_;
};

class XgrammarGrammar final : public TokenGrammar {
 public:
  XgrammarGrammar(xgrammar::CompiledGrammar g, int n_vocab) : g_(std::move(g)), n_vocab_(n_vocab) {}
  std::unique_ptr<TokenConstraint> start() const override {
    return std::make_unique<XgrammarConstraint>(g_, n_vocab_);
  }

 private:
  xgrammar::CompiledGrammar g_;
  int n_vocab_;
};

// The EBNF rule `root ::= "<text>"` (xgrammar's EBNF string escapes).
std::string ebnf_literal_rule(const std::string& text) {
  std::string out = "root ::= \"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

Status check_schema(const Json& schema, const char* what) {
  if (auto p = find_unsupported_keyword(schema))
    return make_error(StatusCode::kInvalidArgument, "{}{}: {}", what,
                      p->pointer.empty() ? std::string() : " at " + p->pointer, p->message);
  return Status::ok();
}

// A structural tag's json_schema format node (xgrammar's JSON schema converter, in `style`).
Json schema_format(const Json& schema, ArgumentsStyle style) {
  Json f = {{"type", "json_schema"}, {"json_schema", schema}, {"max_whitespace_cnt", kMaxWhitespace}};
  // Parameters in the schema's order: xgrammar's any_order would only count the parameters,
  // not check that the required ones are there (nor that none repeats).
  if (style == ArgumentsStyle::kQwenXml) f["style"] = "qwen_xml";
  return f;
}

xgrammar::Grammar from_structural_tag(const Json& format) {
  const Json tag = {{"type", "structural_tag"}, {"format", format}};
  auto r = xgrammar::Grammar::FromStructuralTag(tag.dump());
  if (auto* e = std::get_if<xgrammar::StructuralTagError>(&r))
    throw std::runtime_error(std::visit([](const auto& err) { return std::string(err.what()); }, *e));
  return std::get<xgrammar::Grammar>(std::move(r));
}

}  // namespace

struct GrammarCompiler::Impl {
  int n_vocab;
  int threads;
  std::vector<int32_t> stops;
  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;
  // The raw-text vocabulary (tokens with control bytes allowed), made on first use.
  std::vector<std::string> text_vocab;
  std::once_flag text_once;
  std::optional<xgrammar::TokenizerInfo> text_info;
  std::optional<xgrammar::GrammarCompiler> text_compiler_;

  Impl(int n, int threads_, std::vector<std::string> vocab, std::vector<std::string> text, std::vector<int32_t> stops_)
      : n_vocab(n),
        threads(threads_),
        stops(std::move(stops_)),
        info(vocab, xgrammar::VocabType::RAW, n, stops, false),
        compiler(info, threads, /*cache_enabled=*/true, /*max_memory_bytes=*/256ll << 20),
        text_vocab(std::move(text)) {}

  xgrammar::GrammarCompiler& text_compiler() {
    std::call_once(text_once, [&] {
      text_info.emplace(text_vocab, xgrammar::VocabType::RAW, n_vocab, stops, false);
      text_compiler_.emplace(*text_info, threads, /*cache_enabled=*/true, /*max_memory_bytes=*/256ll << 20);
      text_vocab = {};
    });
    return *text_compiler_;
  }
  std::shared_ptr<const TokenGrammar> wrap(xgrammar::CompiledGrammar g) {
    return std::make_shared<XgrammarGrammar>(std::move(g), n_vocab);
  }
  xgrammar::Grammar schema_grammar(const Json& schema) {
    return xgrammar::Grammar::FromJSONSchema(schema.dump(), /*any_whitespace=*/true, std::nullopt, std::nullopt,
                                             /*strict_mode=*/true, kMaxWhitespace);
  }
  xgrammar::Grammar arguments_grammar(const Json& schema, ArgumentsStyle style) {
    return style == ArgumentsStyle::kJson ? schema_grammar(schema) : from_structural_tag(schema_format(schema, style));
  }
};

namespace {
// The tokenizer's vocabulary as xgrammar takes it: raw bytes per token, "" (special: never
// allowed) for tokens that must not appear in constrained output — control, unused and
// unknown-type tokens, and every token holding a control byte other than \n and \r. JSON
// never needs those (a tab is only whitespace, and spaces and newlines do as well), while
// xgrammar 0.2.9's length-bounded strings (minLength / maxLength) would let them in raw, which
// JSON forbids inside a string (Python's json.loads rejects it). Its own bounded-repeat rule
// stays: written as a pattern instead, a 120-character bound compiled in 3.2 s, not 25 ms.
// With `text` (grammars with raw text: XML string values, free text before a call), tokens
// with control bytes are kept: a tab is text there. A length-bounded JSON string inside such a
// grammar could then take a raw tab — a call whose arguments do not parse stays content.
std::vector<std::string> raw_vocab(const Tokenizer& tok, bool text) {
  std::vector<std::string> v(static_cast<size_t>(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const TokenType t = tok.token_type(id);
    if (t == TokenType::kControl || t == TokenType::kUnused || t == TokenType::kUnknown || tok.is_eog(id)) continue;
    const std::string_view piece = tok.token_to_piece(id);
    if (!text && std::any_of(piece.begin(), piece.end(), [](char c) {
          const auto u = static_cast<unsigned char>(c);
          return (u < 0x20 && u != '\n' && u != '\r') || u == 0x7f;
        }))
      continue;
    v[static_cast<size_t>(id)] = std::string(piece);
  }
  return v;
}
}  // namespace

GrammarCompiler::GrammarCompiler(const Tokenizer& tok, int n_vocab, int threads)
    : impl_(std::make_unique<Impl>(std::max(n_vocab, tok.n_vocab()), std::max(1, threads), raw_vocab(tok, false),
                                   raw_vocab(tok, true), tok.vocab().eog_ids)) {}

GrammarCompiler::~GrammarCompiler() = default;

int GrammarCompiler::n_vocab() const { return impl_->n_vocab; }

Result<std::shared_ptr<const TokenGrammar>> GrammarCompiler::json_object() {
  return json_schema(Json{{"type", "object"}});
}

Result<std::shared_ptr<const TokenGrammar>> GrammarCompiler::json_schema(const Json& schema) {
  HS_RETURN_IF_ERROR(check_schema(schema, "json_schema.schema"));
  try {
    return impl_->wrap(impl_->compiler.CompileGrammar(impl_->schema_grammar(schema)));
  } catch (const std::exception& e) {
    return make_error(StatusCode::kInvalidArgument, "json_schema.schema: {}", e.what());
  }
}

Result<std::shared_ptr<const TokenGrammar>> GrammarCompiler::tool_calls(const std::vector<ToolCallAlternative>& alts,
                                                                        const std::string& end, const std::string& more,
                                                                        int max_calls) {
  if (alts.empty()) return make_error(StatusCode::kInvalidArgument, "no tool to call");
  if (max_calls < 1 || max_calls > 8) return make_error(StatusCode::kInvalidArgument, "max_calls {} is not 1..8", max_calls);
  bool raw_text = false;
  for (const auto& a : alts) {
    HS_RETURN_IF_ERROR(check_schema(a.schema, "tools[].function.parameters"));
    raw_text = raw_text || a.style != ArgumentsStyle::kJson;
  }
  xgrammar::GrammarCompiler& compiler = raw_text ? impl_->text_compiler() : impl_->compiler;
  try {
    std::vector<xgrammar::Grammar> options;  // one call: lead, arguments, end
    for (const auto& a : alts) {
      std::vector<xgrammar::Grammar> parts;
      if (!a.lead.empty()) parts.push_back(xgrammar::Grammar::FromEBNF(ebnf_literal_rule(a.lead)));
      parts.push_back(impl_->arguments_grammar(a.schema, a.style));
      if (!end.empty()) parts.push_back(xgrammar::Grammar::FromEBNF(ebnf_literal_rule(end)));
      options.push_back(parts.size() == 1 ? parts[0] : xgrammar::Grammar::Concat(parts));
    }
    const xgrammar::Grammar call = options.size() == 1 ? options[0] : xgrammar::Grammar::Union(options);
    if (max_calls == 1 || more.empty()) return impl_->wrap(compiler.CompileGrammar(call));
    // 1..max_calls calls: call, or call more call, or ... (a union of the lengths).
    const xgrammar::Grammar next = xgrammar::Grammar::Concat({xgrammar::Grammar::FromEBNF(ebnf_literal_rule(more)), call});
    std::vector<xgrammar::Grammar> lengths;
    std::vector<xgrammar::Grammar> seq = {call};
    for (int k = 1; k <= max_calls; ++k) {
      lengths.push_back(seq.size() == 1 ? seq[0] : xgrammar::Grammar::Concat(seq));
      seq.push_back(next);
    }
    return impl_->wrap(compiler.CompileGrammar(xgrammar::Grammar::Union(lengths)));
  } catch (const std::exception& e) {
    return make_error(StatusCode::kInvalidArgument, "tools[].function.parameters: {}", e.what());
  }
}

Result<std::shared_ptr<const TokenGrammar>> GrammarCompiler::triggered_tool_calls(
    const std::vector<TriggeredToolCall>& tags, const std::string& trigger, bool at_most_one) {
  if (tags.empty() || trigger.empty()) return make_error(StatusCode::kInvalidArgument, "no tool to call");
  Json tag_list = Json::array();
  for (const auto& t : tags) {
    if (!t.begin.starts_with(trigger))
      return make_error(StatusCode::kInvalidArgument, "a call's opening '{}' does not start with '{}'", t.begin, trigger);
    HS_RETURN_IF_ERROR(check_schema(t.schema, "tools[].function.parameters"));
    tag_list.push_back({{"type", "tag"}, {"begin", t.begin}, {"content", schema_format(t.schema, t.style)}, {"end", t.end}});
  }
  const Json format = {{"type", "triggered_tags"}, {"triggers", Json::array({trigger})}, {"tags", tag_list},
                       {"at_least_one", false}, {"stop_after_first", at_most_one}};
  try {
    return impl_->wrap(impl_->text_compiler().CompileGrammar(from_structural_tag(format)));
  } catch (const std::exception& e) {
    return make_error(StatusCode::kInvalidArgument, "tools[].function.parameters: {}", e.what());
  }
}

}  // namespace hs::grammar
