// grammar/grammar_compiler.h — JSON schemas and forced tool calls → token grammars.
//
// One GrammarCompiler per served model: it gives xgrammar (Apache-2.0, built from its PyPI
// sdist, third_party/) the model's vocabulary once — every token's raw bytes, control and
// unused tokens as "special" (never allowed inside the output), the end-of-generation tokens
// as its stop tokens — and compiles what requests ask for into engine TokenGrammars
// (engine/token_constraint.h):
//   json_object()         any JSON object (response_format json_object);
//   json_schema(schema)   a value valid under `schema` (response_format json_schema);
//   tool_calls(alts, end, more, max) one of several "lead text, JSON value of a schema, end
//                         text" sequences (a forced tool call's name and arguments, then its
//                         closing tag), optionally followed by up to max - 1 further calls,
//                         each `more` (the next call's opening) then one of the alternatives.
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

struct ToolCallAlternative {
  std::string lead;               // literal text before the arguments (may be empty)
  nlohmann::ordered_json schema;  // the arguments' schema (an object schema; {} = any object)
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

  int n_vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hs::grammar
