// server/api_error.h — the errors the HTTP layer returns, in OpenAI's JSON shape.
//
// Every failure a client can see is an ApiError: the HTTP status, an OpenAI/llama.cpp error
// type ("invalid_request_error", "not_found_error", ...), a message that names the offending
// value, and `param`, the request field at fault (empty: none). The body is
// {"error":{"message","type","param","code"}} with `code` the HTTP status as an int (vLLM's
// choice; OpenAI's own code is a string id or null). Cost: one small JSON object per error.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace hs::server {

struct ApiError {
  int status = 500;
  std::string type = "server_error";
  std::string message;
  std::string param;  // the request field at fault; empty: none (JSON null)
};

// Constructors for each kind, with the status and type llama.cpp / OpenAI use.
ApiError invalid_request(std::string message, std::string param = {});  // 400
ApiError authentication_error(std::string message);                     // 401
ApiError not_found(std::string message, std::string param = {});        // 404
ApiError request_too_large(std::string message);                        // 413
ApiError server_overloaded(std::string message);                        // 429
ApiError server_error(std::string message);                             // 500
ApiError unavailable(std::string message);                              // 503
ApiError timeout_error(std::string message);                            // 504

// {"error":{"message","type","param","code"}}
nlohmann::ordered_json api_error_json(const ApiError& e);
// The same, serialized (invalid UTF-8 in the message is replaced, never thrown on).
std::string api_error_body(const ApiError& e);

// Serializes without throwing: invalid UTF-8 becomes U+FFFD. Used for every response body.
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace hs::server
