// server/api_error.cpp — see api_error.h.
#include "server/api_error.h"

#include <utility>

namespace hs::server {
namespace {

ApiError make(int status, const char* type, std::string message, std::string param = {}) {
  return ApiError{status, type, std::move(message), std::move(param)};
}

}  // namespace

ApiError invalid_request(std::string message, std::string param) {
  return make(400, "invalid_request_error", std::move(message), std::move(param));
}
ApiError authentication_error(std::string message) {
  return make(401, "authentication_error", std::move(message));
}
ApiError not_found(std::string message, std::string param) {
  return make(404, "not_found_error", std::move(message), std::move(param));
}
ApiError request_too_large(std::string message) { return make(413, "request_too_large", std::move(message)); }
ApiError server_overloaded(std::string message) { return make(429, "server_overloaded", std::move(message)); }
ApiError server_error(std::string message) { return make(500, "server_error", std::move(message)); }
ApiError unavailable(std::string message) { return make(503, "unavailable_error", std::move(message)); }
ApiError timeout_error(std::string message) { return make(504, "timeout", std::move(message)); }

nlohmann::ordered_json api_error_json(const ApiError& e) {
  nlohmann::ordered_json err;
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.param);
  err["code"] = e.status;
  nlohmann::ordered_json j;
  j["error"] = std::move(err);
  return j;
}

std::string api_error_body(const ApiError& e) { return dump_json(api_error_json(e)); }

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace hs::server
