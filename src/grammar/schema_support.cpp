// grammar/schema_support.cpp — see schema_support.h.
#include "grammar/schema_support.h"

#include <fmt/format.h>

#include <array>
#include <string_view>

namespace hs::grammar {
namespace {

using Json = nlohmann::ordered_json;

// Keywords xgrammar 0.2.9 parses but does not enforce (json_schema_converter.cc warns and
// ignores them), and the 2019+ dynamic references it does not resolve.
constexpr std::array<std::string_view, 14> kUnenforced = {
    "not",          "if",       "then",        "else",        "dependentRequired", "dependentSchemas", "dependencies",
    "contains",     "minContains", "maxContains", "$dynamicRef", "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor"};

std::string escape_pointer_token(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::optional<SchemaProblem> check(const Json& s, const std::string& at, int depth);

// A keyword whose value maps names to subschemas (properties, $defs, ...).
std::optional<SchemaProblem> check_map(const Json& s, const char* key, const std::string& at, int depth) {
  auto it = s.find(key);
  if (it == s.end()) return std::nullopt;
  if (!it->is_object())
    return SchemaProblem{at + "/" + key, "", fmt::format("'{}' must be an object of schemas", key)};
  for (auto e = it->begin(); e != it->end(); ++e)
    if (auto p = check(e.value(), at + "/" + key + "/" + escape_pointer_token(e.key()), depth + 1)) return p;
  return std::nullopt;
}

// A keyword whose value is one subschema (or, for `items`, the old array form).
std::optional<SchemaProblem> check_one(const Json& s, const char* key, const std::string& at, int depth) {
  auto it = s.find(key);
  if (it == s.end()) return std::nullopt;
  if (it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i)
      if (auto p = check((*it)[i], fmt::format("{}/{}/{}", at, key, i), depth + 1)) return p;
    return std::nullopt;
  }
  return check(*it, at + "/" + key, depth + 1);
}

std::optional<SchemaProblem> check(const Json& s, const std::string& at, int depth) {
  if (depth > 64) return SchemaProblem{at, "", "the schema nests deeper than 64 levels"};
  if (s.is_boolean()) return std::nullopt;
  if (!s.is_object())
    return SchemaProblem{at, "", fmt::format("a schema must be an object or a boolean, got {}", s.type_name())};
  for (std::string_view k : kUnenforced)
    if (s.contains(k))
      return SchemaProblem{at, std::string(k),
                           fmt::format("JSON Schema keyword '{}' is not supported by constrained decoding", k)};
  if (auto u = s.find("uniqueItems"); u != s.end() && u->is_boolean() && u->get<bool>())
    return SchemaProblem{at, "uniqueItems", "JSON Schema keyword 'uniqueItems' is not supported by constrained decoding"};
  if (auto a = s.find("allOf"); a != s.end() && a->is_array() && a->size() > 1)
    return SchemaProblem{at, "allOf", "'allOf' with more than one schema is not supported by constrained decoding"};
  if (s.contains("multipleOf")) {
    const auto t = s.find("type");
    const bool integer = t != s.end() && t->is_string() && t->get<std::string>() == "integer";
    const auto m = s.find("multipleOf");
    if (!integer || !m->is_number_integer())
      return SchemaProblem{at, "multipleOf",
                           "'multipleOf' is supported only as an integer on type 'integer' by constrained decoding"};
  }
  for (const char* key : {"properties", "patternProperties", "$defs", "definitions"})
    if (auto p = check_map(s, key, at, depth)) return p;
  for (const char* key : {"items", "prefixItems", "anyOf", "oneOf", "allOf", "additionalProperties",
                          "unevaluatedProperties", "unevaluatedItems", "propertyNames"})
    if (auto p = check_one(s, key, at, depth)) return p;
  return std::nullopt;
}

}  // namespace

std::optional<SchemaProblem> find_unsupported_keyword(const Json& schema) { return check(schema, "", 0); }

}  // namespace hs::grammar
