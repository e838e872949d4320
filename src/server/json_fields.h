// server/json_fields.h — the small request-parsing helpers every API parser shares
// (openai_protocol, structured_output, anthropic_protocol, responses_protocol): a field that is
// present and not null, a parameter path, the type-error 400, the "only these keys" rule, and
// HS_API_TRY. Header-only; each is O(size of the object it looks at).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace hs::server {

// Returns the error of a MaybeError-returning call, if any.
#define HS_API_TRY(expr)                                           \
  do {                                                             \
    if (::std::optional<::hs::server::ApiError> hs_err_ = (expr)) return hs_err_; \
  } while (0)

// A field that is present and not null (null counts as absent: clients send null for unset).
inline const nlohmann::ordered_json* field(const nlohmann::ordered_json& obj, std::string_view key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// "at.key" ("key" at the top level): how a 400 names a nested field.
inline std::string at_key(std::string_view at, std::string_view key) {
  return at.empty() ? std::string(key) : fmt::format("{}.{}", at, key);
}

// 400: "'param' must be WANT, got TYPE".
inline ApiError type_error(std::string_view param, const char* want, const nlohmann::ordered_json& got) {
  return invalid_request(fmt::format("'{}' must be {}, got {}", param, want, got.type_name()), std::string(param));
}

// Every non-null key of `obj` must be one of `allowed`: anything else is a field this server
// does not implement, and accepting it silently would pretend it did (400 naming it).
inline std::optional<ApiError> only_keys(const nlohmann::ordered_json& obj, std::initializer_list<std::string_view> allowed,
                                         std::string_view at) {
  for (const auto& [k, v] : obj.items()) {
    if (v.is_null() || std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
    const std::string p = at_key(at, k);
    return invalid_request(fmt::format("'{}' is not supported by this server", p), p);
  }
  return std::nullopt;
}

}  // namespace hs::server
