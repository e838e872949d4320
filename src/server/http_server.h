// server/http_server.h — the HTTP front end: OpenAI routes, health, metrics, tokenize.
//
// HttpServer owns a cpp-httplib server on a background thread with a pool of HTTP threads
// (ServerConfig::http_threads; each open connection holds one). It starts listening before
// the model is loaded: until set_ready() hands it the engine, /health answers 503 "Loading
// model" and every other route 503. HTTP threads parse and validate JSON, apply the chat
// template, tokenize, submit to the Engine and stream events back (SSE) or wait for them;
// they poll the client's socket while waiting and cancel the engine requests of a client
// that went away. JSON and HTTP stay here (ARCHITECTURE.md); the engine sees RequestParams.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health and
// /v1/health, GET /metrics, POST /tokenize, POST /detokenize. With an api_key, /v1/* (but
// /v1/health), /tokenize and /detokenize need `Authorization: Bearer <key>`.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"

namespace hs {
class Engine;
class Tokenizer;
class ChatTemplate;
}  // namespace hs

namespace hs::server {

class ServerMetrics;

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: any free port (port() says which)
  std::string api_key;                    // empty: no authentication
  std::string served_model_name = "hindsight";
  size_t max_body_bytes = 8u << 20;       // larger bodies get 413
  double request_timeout_s = 600;         // per engine request; 0: none (504 when it passes)
  int http_threads = 64;                  // concurrent connections served
  std::string access_log_path;            // one JSON object per request appended here ("" = none)
};

// What set_ready() hands over; everything must outlive stop().
struct ServingModel {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: chat completions answer 400
  int max_model_len = 0;                        // prompt + completion tokens per request
  int n_vocab = 0;                              // the logits row (0: the tokenizer's vocabulary)
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig cfg);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and serves on a background thread. Fails when the address is taken.
  Status start();
  // From now on the routes answer with this model.
  void set_ready(const ServingModel& model);
  // New requests get 503; requests in flight continue (stop the engine to end them).
  void begin_shutdown();
  // Stops listening and waits for the HTTP threads (streams see the stop and end).
  void stop();

  int port() const;  // the bound port (after start())
  bool ready() const;
  const ServerConfig& config() const;
  ServerMetrics& metrics();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hs::server
