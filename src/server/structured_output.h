// server/structured_output.h — `response_format` and forced tool calls → a token grammar.
//
// parse_response_format() reads OpenAI's `response_format` ({"type": "text"}, {"type":
// "json_object"}, {"type": "json_schema", "json_schema": {"name", "schema", "strict"?,
// "description"?}}) into a ResponseFormat, with 400s naming the field for a wrong shape. The
// schema is enforced whether or not `strict` is set (a constraint that is asked for is never
// silently weaker). compile_*() turn a ResponseFormat or a forced call (tool_calls.h) into an
// engine TokenGrammar through the model's GrammarCompiler (grammar/grammar_compiler.h); a
// schema keyword the grammar cannot enforce, or a schema xgrammar rejects, is a 400 naming
// it. Compiling costs milliseconds (more for big schemas; compiled schemas are cached).
#pragma once

#include <memory>
#include <string>

#include "engine/token_constraint.h"
#include "grammar/grammar_compiler.h"
#include "server/openai_protocol.h"
#include "server/tool_calls.h"

namespace hs::server {

struct ResponseFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema } kind = Kind::kText;
  Json schema;          // kJsonSchema
  std::string name;     // json_schema.name
  bool strict = false;  // json_schema.strict (informational: the schema is always enforced)
  bool constrained() const { return kind != Kind::kText; }
};

MaybeError parse_response_format(const Json& body, ResponseFormat& out);

MaybeError compile_response_format(grammar::GrammarCompiler& gc, const ResponseFormat& rf,
                                   std::shared_ptr<const TokenGrammar>& out);
MaybeError compile_forced_tool_call(grammar::GrammarCompiler& gc, const ForcedToolCall& call,
                                    std::shared_ptr<const TokenGrammar>& out);
MaybeError compile_auto_tool_calls(grammar::GrammarCompiler& gc, const AutoToolCalls& calls,
                                   std::shared_ptr<const TokenGrammar>& out);

}  // namespace hs::server
