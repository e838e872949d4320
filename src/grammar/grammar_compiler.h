// grammar/grammar_compiler.h — JSON schemas and forced tool calls → token grammars.
//
// One GrammarCompiler per served model: it gives xgrammar (Apache-2.0, built from its PyPI
// sdist, third_party/) the model's vocabulary once — every token's raw bytes, control and
// unused tokens as "special" (never allowed inside the output), the end-of-generation tokens
// as its stop tokens — and compiles what requests ask for into engine TokenGrammars
// (engine/token_constraint.h):
//   json_object()         any JSON object (response_format json_object);
//   json_schema(schema)   a value valid under `schema` (response_format json_schema);
//   tool_calls(alts, end, more, max) one of several "lead text, arguments of a schema, end
//                         text" sequences (a forced tool call's name and arguments, then its
//                         closing tag), optionally followed by up to max - 1 further calls,
//                         each `more` (the next call's opening) then one of the alternatives.
//   triggered_tool_calls(tags, trigger, at_most_one) free text (tool_choice "auto") in which
//                         every occurrence of `trigger` (the format's opening tag) must go on
//                         as one of the tags — begin text, arguments of its schema, end text —
//                         after which free text resumes; with at_most_one, nothing but the end
//                         of generation follows the first call.
// Arguments are one JSON value (ArgumentsStyle::kJson: Hermes, Llama 3.1) or the XML parameter
// list of Qwen3-Coder / Qwen3.5 (kQwenXml: `<parameter=KEY>VALUE</parameter>` per property,
// strings raw, other values JSON; in the schema's order, required ones present, at most a few
// whitespace characters around values; xgrammar's "qwen_xml").
// Two vocabularies: JSON-only grammars never allow a token that holds a raw control byte
// (JSON has no use for one); grammars with raw text in them (XML string values, the free text
// of triggered_tool_calls) allow tabs and the like, so code keeps its indentation — inside
// their JSON values the grammar itself still rejects raw control characters (but see
// raw_vocab in the .cpp for xgrammar's length-bounded strings). The second vocabulary is
// built on first use.
// Schemas are checked first (grammar/schema_support.h): a keyword the grammar would not
// enforce is an InvalidArgument naming it, as is a schema xgrammar rejects. Output is
// compact-or-spaced JSON (any whitespace, at most a few characters of it in a row, so a
// model cannot pad forever). Compiling costs milliseconds to a few hundred for large
// vocabularies and schemas; xgrammar caches compiled schemas by their text. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/token_constraint.h"

namespace hs {
class Tokenizer;
}

namespace hs::grammar {

enum class ArgumentsStyle { kJson, kQwenXml };

struct ToolCallAlternative {
  std::string lead;               // literal text before the arguments (may be empty)
  nlohmann::ordered_json schema;  // the arguments' schema (an object schema; {} = any object)
  ArgumentsStyle style = ArgumentsStyle::kJson;
};

struct TriggeredToolCall {
  std::string begin;              // the call's opening through its name (starts with the trigger)
  nlohmann::ordered_json schema;  // the arguments' schema
  std::string end;                // the call's closing
  ArgumentsStyle style = ArgumentsStyle::kJson;
};

class GrammarCompiler {
 public:
  // `n_vocab`: the model's logits row (at least the tokenizer's vocabulary; extra ids are
  // padding and never allowed). `threads`: xgrammar's compile threads.
  GrammarCompiler(const Tokenizer& tok, int n_vocab, int threads = 2);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  Result<std::shared_ptr<const TokenGrammar>> json_object();
  Result<std::shared_ptr<const TokenGrammar>> json_schema(const nlohmann::ordered_json& schema);
  // `max_calls` >= 1; calls after the first start with `more` (ignored when max_calls is 1).
  // The grammar grows with max_calls² (a union of 1..max_calls sequences): keep it small.
  Result<std::shared_ptr<const TokenGrammar>> tool_calls(const std::vector<ToolCallAlternative>& alternatives,
                                                         const std::string& end, const std::string& more = {},
                                                         int max_calls = 1);
  // `tags` non-empty, each begin starting with `trigger`.
  Result<std::shared_ptr<const TokenGrammar>> triggered_tool_calls(const std::vector<TriggeredToolCall>& tags,
                                                                   const std::string& trigger, bool at_most_one);

  int n_vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hs::grammar
