// grammar/schema_support.h — which JSON Schema keywords constrained decoding enforces.
//
// xgrammar (the grammar engine, grammar/grammar_compiler.h) turns a schema into a grammar but
// only logs a warning for keywords it cannot enforce (`not`, `if`/`then`/`else`, `contains`,
// `uniqueItems`, ...), so output could follow the grammar yet fail the client's validator.
// find_unsupported_keyword() walks the whole schema first (every subschema: properties, items,
// $defs, anyOf, ...) and names the first such keyword with its JSON pointer, so the server can
// answer 400 instead of silently not enforcing it. Annotations (title, description, default,
// examples, $comment, ...) and unknown keywords are ignored, as JSON Schema itself ignores
// them. Linear in the schema's size.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace hs::grammar {

struct SchemaProblem {
  std::string pointer;  // JSON pointer of the subschema ("" = the root, "/properties/a")
  std::string keyword;  // the keyword ("uniqueItems"), or "" when the subschema is not a schema
  std::string message;  // one sentence for the client
};

std::optional<SchemaProblem> find_unsupported_keyword(const nlohmann::ordered_json& schema);


}  // namespace hs::grammar
