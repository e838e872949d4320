// server/http_server.h — the HTTP front end: OpenAI routes, health, metrics, tokenize.
//
// HttpServer routes requests that its HttpTransport (http_transport.h: Boost.Asio io threads,
// deadlines, caps, keep-alive, pipelining) has read. It starts listening before the model is
// loaded: until set_ready() hands it the engine, /health answers 503 "Loading model" and every
// other route 503. Cheap routes (health, metrics, models, errors) answer on the io thread; the
// others parse and validate JSON, apply the chat template, tokenize and submit to the Engine on
// a small WorkerPool (ServerConfig::http_threads), then return: the engine's events wake the
// connection, which writes SSE chunks or the one JSON body as they come, so a stream or a
// pending answer holds no thread. A client that goes away has its engine requests cancelled.
// JSON and HTTP stay here (ARCHITECTURE.md); the engine sees RequestParams.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/messages (+ count_tokens),
// POST /v1/responses, GET /v1/models, GET /health and /v1/health, GET /metrics, POST /tokenize,
// POST /detokenize. With an api_key, /v1/* (but /v1/health), /tokenize and /detokenize need
// `Authorization: Bearer <key>` (or `x-api-key`). Beyond max_connections a connection gets one
// answer — /health, /v1/health and /metrics as usual, anything else 503 — and is closed.
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
  int http_threads = 8;                   // worker threads: parse, template, tokenize, submit
  int io_threads = 2;                     // sockets: accept, read, write (event-driven)
  int max_connections = 1024;             // open connections; beyond: 503 (but /health), then close
  double header_timeout_s = 10;           // the whole request head
  double body_read_timeout_s = 30;        // each read of a request body
  double write_timeout_s = 30;            // each write to the client
  double keep_alive_timeout_s = 30;       // idle between two requests
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

  // Binds host:port and serves on the io threads. Fails, naming the address, when it is taken.
  Status start();
  // From now on the routes answer with this model.
  void set_ready(const ServingModel& model);
  // New requests get 503; requests in flight continue (stop the engine to end them).
  void begin_shutdown();
  // Stops listening, lets the worker tasks finish, aborts the exchanges still open (their
  // engine requests are cancelled) and joins every thread. Call before the engine dies.
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
