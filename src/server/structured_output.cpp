// server/structured_output.cpp — see structured_output.h.
#include "server/structured_output.h"

#include <fmt/format.h>

#include "server/json_fields.h"

namespace hs::server {

MaybeError parse_response_format(const Json& body, ResponseFormat& out) {
  out = ResponseFormat{};
  const Json* rf = field(body, "response_format");
  if (!rf) return std::nullopt;
  if (!rf->is_object()) return type_error("response_format", "an object", *rf);
  const Json* type = field(*rf, "type");
  if (!type || !type->is_string())
    return invalid_request("'response_format.type' must be 'text', 'json_object' or 'json_schema'",
                           "response_format.type");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    out.kind = ResponseFormat::Kind::kJsonObject;
    return std::nullopt;
  }
  if (t != "json_schema")
    return invalid_request(fmt::format("'response_format.type' is '{}': expected 'text', 'json_object' or 'json_schema'",
                                       t.size() > 64 ? t.substr(0, 64) + "..." : t),
                           "response_format.type");
  const Json* js = field(*rf, "json_schema");
  if (!js) return invalid_request("'response_format.json_schema' is required for type 'json_schema'",
                                  "response_format.json_schema");
  if (!js->is_object()) return type_error("response_format.json_schema", "an object", *js);
  const Json* name = field(*js, "name");
  if (name && !name->is_string()) return type_error("response_format.json_schema.name", "a string", *name);
  if (name) out.name = name->get<std::string>();
  const Json* strict = field(*js, "strict");
  if (strict && !strict->is_boolean()) return type_error("response_format.json_schema.strict", "a boolean", *strict);
  out.strict = strict && strict->get<bool>();
  const Json* schema = field(*js, "schema");
  if (!schema) return invalid_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
  if (!schema->is_object() && !schema->is_boolean())
    return type_error("response_format.json_schema.schema", "a JSON Schema object", *schema);
  out.kind = ResponseFormat::Kind::kJsonSchema;
  out.schema = *schema;
  return std::nullopt;
}

MaybeError compile_response_format(grammar::GrammarCompiler& gc, const ResponseFormat& rf,
                                   std::shared_ptr<const TokenGrammar>& out) {
  if (!rf.constrained()) return std::nullopt;
  auto g = rf.kind == ResponseFormat::Kind::kJsonObject ? gc.json_object() : gc.json_schema(rf.schema);
  if (!g.is_ok()) return invalid_request("response_format: " + g.status().message(), "response_format");
  out = std::move(*g);
  return std::nullopt;
}

MaybeError compile_forced_tool_call(grammar::GrammarCompiler& gc, const ForcedToolCall& call,
                                    std::shared_ptr<const TokenGrammar>& out) {
  std::vector<grammar::ToolCallAlternative> alts;
  const auto style = call.xml ? grammar::ArgumentsStyle::kQwenXml : grammar::ArgumentsStyle::kJson;
  for (const auto& [lead, schema] : call.alternatives) alts.push_back({lead, schema, style});
  auto g = gc.tool_calls(alts, call.end, call.more, call.max_calls);
  if (!g.is_ok()) return invalid_request("tools: " + g.status().message(), "tools");
  out = std::move(*g);
  return std::nullopt;
}

MaybeError compile_auto_tool_calls(grammar::GrammarCompiler& gc, const AutoToolCalls& calls,
                                   std::shared_ptr<const TokenGrammar>& out) {
  std::vector<grammar::TriggeredToolCall> tags;
  const auto style = calls.xml ? grammar::ArgumentsStyle::kQwenXml : grammar::ArgumentsStyle::kJson;
  for (const auto& c : calls.calls) tags.push_back({c.begin, c.schema, c.end, style});
  auto g = gc.triggered_tool_calls(tags, calls.trigger, calls.at_most_one);
  if (!g.is_ok()) return invalid_request("tools: " + g.status().message(), "tools");
  out = std::move(*g);
  return std::nullopt;
}

}  // namespace hs::server
