// server/routes.h — internal to server/: the state route handlers share and the handlers
// that live outside http_server.cpp (chat and text completions, completion_routes.cpp;
// Anthropic's messages, messages_route.cpp; OpenAI's Responses, responses_route.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/request.h"
#include "grammar/grammar_compiler.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"

namespace hs::server {

struct ServerState {
  explicit ServerState(ServerConfig c) : cfg(std::move(c)), metrics(cfg.served_model_name) {}
  ServerConfig cfg;
  ServerMetrics metrics;
  std::atomic<bool> ready{false};     // `model` is valid (release/acquire)
  std::atomic<bool> stopping{false};  // new requests get 503
  ServingModel model;
  std::string bos_token, eos_token;   // the tokenizer's spelling, for chat templates
  int64_t created = 0;                // unix seconds when the server started

  // The model's grammar compiler (response_format, forced tool calls), built on first use:
  // it copies the vocabulary into xgrammar (~0.1 s for 150K tokens), which requests without
  // a grammar never pay.
  grammar::GrammarCompiler& grammar() {
    std::call_once(grammar_once_, [this] {
      grammar_ = std::make_unique<grammar::GrammarCompiler>(*model.tokenizer, model.n_vocab);
    });
    return *grammar_;
  }

 private:
  std::once_flag grammar_once_;
  std::unique_ptr<grammar::GrammarCompiler> grammar_;
};

// Per request, made by the route wrapper.
struct RouteContext {
  std::string request_id;
  SteadyTime arrival;
  std::string body;  // POST routes: the request body, read under the size cap however it was framed
  Waker wake;        // wakes the connection to pump the response's AsyncBody (engine events)
};

// `s` made safe for one log line: control characters, DEL, quotes and backslashes escaped
// (\n, \t, \xNN), invalid UTF-8 bytes as \xNN, cut to `max_bytes` with "..." (a client's path,
// method or header cannot forge a log line or flood the log).
std::string log_safe(std::string_view s, size_t max_bytes = 256);

void send_json(HttpResponse& res, int status, const Json& body);
void send_error(HttpResponse& res, const ApiError& e);

// Renders `messages` with the model's chat template (400 naming `messages` on failure).
MaybeError render_chat_prompt(const ServerState& st, const Json& messages, bool add_generation_prompt,
                              const Json& template_kwargs, std::string& out);

void handle_chat_completions(ServerState& st, const HttpRequest& req, HttpResponse& res,
                             const RouteContext& ctx);
void handle_completions(ServerState& st, const HttpRequest& req, HttpResponse& res,
                        const RouteContext& ctx);
// Anthropic's Messages API (messages_route.cpp).
void handle_messages(ServerState& st, const HttpRequest& req, HttpResponse& res, const RouteContext& ctx);
void handle_count_tokens(ServerState& st, const HttpRequest& req, HttpResponse& res,
                         const RouteContext& ctx);
// OpenAI's Responses API (responses_route.cpp): POST /v1/responses, and GET / DELETE
// /v1/responses/{id}, a 404 (nothing is stored).
void handle_responses(ServerState& st, const HttpRequest& req, HttpResponse& res, const RouteContext& ctx);
void handle_stored_response(ServerState& st, const HttpRequest& req, HttpResponse& res,
                            const RouteContext& ctx);

}  // namespace hs::server
