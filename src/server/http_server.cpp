// server/http_server.cpp — HttpServer: httplib setup, the route wrapper (request id, auth,
// readiness, active-request gauge, exceptions → 500 JSON), the small routes (health,
// models, metrics, tokenize, detokenize) and one log line per request. Chat and text
// completions are in completion_routes.cpp, Anthropic's /v1/messages in messages_route.cpp,
// OpenAI's /v1/responses in responses_route.cpp; errors on /v1/messages paths (auth,
// 404/405/413, ...) have Anthropic's error shape.
#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "server/anthropic_protocol.h"
#include "server/connection_probe.h"
#include "server/openai_response.h"
#include "server/routes.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hs::server {
namespace {

using Clock = std::chrono::steady_clock;

// When the current HTTP thread started its request (set by the pre-routing handler, read by
// the logger; both run on the connection's thread).
thread_local Clock::time_point t_request_start{};

// Compares without an early exit, so the time taken does not reveal how much of the key matched.
bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// A client's X-Request-Id is echoed if it is short printable ASCII; else a fresh one.
std::string request_id_for(const httplib::Request& req) {
  std::string id = req.get_header_value("X-Request-Id");
  bool ok = !id.empty() && id.size() <= 128;
  for (char c : id) ok = ok && c > 32 && c < 127;
  return ok ? id : random_hex_id("req-");
}

struct RouteFlags {
  bool auth = true;    // needs the API key (when one is set)
  bool ready = true;   // needs the model
  bool active = true;  // counts in http_requests_active (not /health, /metrics: an idle
                       // server's scrape then reads 0)
};

ApiError error_for_status(const httplib::Request& req, int status, size_t max_body) {
  switch (status) {
    case 400: return invalid_request("malformed HTTP request");
    case 404: return not_found(fmt::format("no route for {} {}", log_safe(req.method, 16), log_safe(req.path)));
    case 413: return request_too_large(fmt::format("the request body exceeds the limit of {} bytes", max_body));
    case 414: return ApiError{414, "invalid_request_error", "the request URI is too long", ""};
    case 499: return ApiError{499, "invalid_request_error", "the client closed the request", ""};
    default: break;
  }
  return ApiError{status, status < 500 ? "invalid_request_error" : "server_error", fmt::format("HTTP {}", status), ""};
}

// The routes and their methods (405 with Allow for a known path asked with another method).
struct KnownRoute {
  const char* path;
  const char* allow;
};
constexpr KnownRoute kRoutes[] = {
    {"/health", "GET"},          {"/v1/health", "GET"},           {"/metrics", "GET"},
    {"/v1/models", "GET"},       {"/tokenize", "POST"},           {"/detokenize", "POST"},
    {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/messages", "POST"},
    {"/v1/messages/count_tokens", "POST"}, {"/v1/responses", "POST"},
};
const char* allowed_methods(std::string_view path) {
  for (const KnownRoute& r : kRoutes)
    if (path == r.path) return r.allow;
  return nullptr;
}

// Anthropic's routes answer errors in Anthropic's shape (the SDKs read error.type from it).
bool anthropic_path(std::string_view path) { return path == "/v1/messages" || path.starts_with("/v1/messages/"); }

// Only SO_REUSEADDR (a restart may bind while old connections sit in TIME_WAIT); httplib's
// default also sets SO_REUSEPORT, which lets a second server bind the same port and take a
// share of its connections.
void listen_socket_options(socket_t sock) {
  int yes = 1;
  (void)setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
}

}  // namespace

std::string log_safe(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 8);
  auto hex = [&](unsigned char c) { out += fmt::format("\\x{:02x}", c); };
  size_t i = 0;
  for (; i < s.size() && out.size() < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c < 0x20 || c == 0x7f) hex(c);
    else if (c < 0x80) out += static_cast<char>(c);
    else {  // a whole, valid UTF-8 sequence passes; anything else byte by byte as \xNN
      const int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
      bool ok = len > 0 && i + len <= s.size() && !(c == 0xC0 || c == 0xC1 || c > 0xF4);
      for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
      if (ok) {
        out.append(s.data() + i, static_cast<size_t>(len));
        i += static_cast<size_t>(len) - 1;
      } else {
        hex(c);
      }
    }
  }
  if (i < s.size()) out += "...";
  return out;
}

void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, api_error_json(e)); }

namespace {
// An error in the shape of the API `req` was sent to (X-Request-Id already set, if any).
void send_route_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  if (anthropic_path(req.path))
    return send_json(res, e.status, anthropic_error_json(e, res.get_header_value("X-Request-Id")));
  send_error(res, e);
}
}  // namespace

struct HttpServer::Impl {
  explicit Impl(ServerConfig cfg) : st(std::move(cfg)) {}

  ServerState st;
  httplib::Server svr;
  std::thread listener;
  int bound_port = -1;
  // --access-log: one JSON object per request (every client string JSON-escaped), appended and
  // flushed per line under a mutex (the HTTP threads log concurrently).
  std::mutex access_mu;
  std::ofstream access_log;

  void log_access(const httplib::Request& req, const httplib::Response& res, double ms) {
    if (!access_log.is_open()) return;
    using namespace std::chrono;
    const auto now = system_clock::now();
    const std::time_t t = system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char ts[32];
    std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    const auto msec = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
    Json j;
    j["time"] = fmt::format("{}.{:03d}Z", ts, static_cast<int>(msec));
    j["request_id"] = res.get_header_value("X-Request-Id");
    j["remote_addr"] = req.remote_addr;
    j["remote_port"] = req.remote_port;
    j["method"] = req.method;
    j["path"] = req.path;
    j["status"] = res.status;
    j["duration_ms"] = std::round(ms * 1000.0) / 1000.0;
    if (req.has_header("Content-Length")) j["request_bytes"] = req.get_header_value("Content-Length");
    if (!res.body.empty()) j["response_bytes"] = res.body.size();
    if (req.has_header("User-Agent")) j["user_agent"] = req.get_header_value("User-Agent");
    // Invalid UTF-8 from a client is replaced, never a throw (or a raw byte in the log).
    const std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace);
    std::lock_guard lk(access_mu);
    access_log << line << '\n';
    access_log.flush();
  }

  // `Authorization: Bearer KEY` (OpenAI clients) or `x-api-key: KEY` (Anthropic clients);
  // `anthropic-version` and other headers are not looked at.
  bool authorized(const httplib::Request& req) const {
    if (st.cfg.api_key.empty()) return true;
    bool ok = false;
    if (req.has_header("x-api-key")) ok = constant_time_equal(req.get_header_value("x-api-key"), st.cfg.api_key);
    const std::string h = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (h.size() > kBearer.size() && std::string_view(h).substr(0, kBearer.size()) == kBearer)
      ok = constant_time_equal(std::string_view(h).substr(kBearer.size()), st.cfg.api_key) || ok;
    return ok;
  }

  template <typename F>
  httplib::Server::Handler route(RouteFlags flags, F f) {
    return [this, flags, f](const httplib::Request& req, httplib::Response& res) { serve(flags, f, req, res, {}); };
  }

  // A POST route: the body is read here under max_body_bytes whatever its framing
  // (Content-Length is checked by httplib before reading; chunked bodies, which httplib 0.11
  // would buffer whole, are cut off as soon as they pass the cap), then the handler runs.
  template <typename F>
  httplib::Server::HandlerWithContentReader post_route(RouteFlags flags, F f) {
    return [this, flags, f](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
      std::string body;
      bool over = false;
      const size_t cap = st.cfg.max_body_bytes;
      const bool ok = reader([&](const char* data, size_t n) {
        if (body.size() + n > cap) {
          over = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      if (over || res.status == 413) {
        res.set_header("Connection", "close");  // the rest of the body is never read
        res.set_header("X-Request-Id", request_id_for(req));
        return send_route_error(req, res,
                                request_too_large(fmt::format("the request body exceeds the limit of {} bytes", cap)));
      }
      if (!ok) {
        res.set_header("Connection", "close");
        res.set_header("X-Request-Id", request_id_for(req));
        return send_route_error(req, res,
                                invalid_request("the request body could not be read (malformed chunked framing?)"));
      }
      serve(flags, f, req, res, std::move(body));
    };
  }

  template <typename F>
  void serve(RouteFlags flags, const F& f, const httplib::Request& req, httplib::Response& res, std::string body) {
    {
      struct Active {  // the gauge, for the handler's duration
        ServerMetrics& m;
        bool on;
        Active(ServerMetrics& mm, bool o) : m(mm), on(o) { if (on) m.http_request_begin(); }
        ~Active() { if (on) m.http_request_end(); }
      } active{st.metrics, flags.active};
      RouteContext ctx{request_id_for(req), Clock::now(), std::move(body)};
      res.set_header("X-Request-Id", ctx.request_id);
      try {
        if (flags.auth && !authorized(req))
          return send_route_error(req, res,
                                  authentication_error("missing or invalid API key (Authorization: Bearer <key> or "
                                                       "x-api-key: <key>)"));
        if (flags.ready && st.stopping.load())
          return send_route_error(req, res, unavailable("the server is shutting down"));
        if (flags.ready && !st.ready.load(std::memory_order_acquire))
          return send_route_error(req, res, unavailable("Loading model"));
        f(req, res, ctx);
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", log_safe(req.method, 16), log_safe(req.path), log_safe(e.what(), 1024));
        send_route_error(req, res, server_error(fmt::format("internal error: {}", e.what())));
      } catch (...) {
        send_route_error(req, res, server_error("internal error"));
      }
    }
  }

  void health(const httplib::Request&, httplib::Response& res, const RouteContext&) {
    if (st.ready.load(std::memory_order_acquire) && !st.stopping.load())
      return send_json(res, 200, Json{{"status", "ok"}});
    send_error(res, unavailable(st.stopping.load() ? "Shutting down: draining the requests in flight" : "Loading model"));
  }

  void models(const httplib::Request&, httplib::Response& res, const RouteContext&) {
    Json m;
    m["id"] = st.cfg.served_model_name;
    m["object"] = "model";
    m["created"] = st.created;
    m["owned_by"] = "hindsight";
    m["max_model_len"] = st.model.max_model_len;
    send_json(res, 200, Json{{"object", "list"}, {"data", Json::array({std::move(m)})}});
  }

  void metrics(const httplib::Request&, httplib::Response& res, const RouteContext&) {
    std::string text;
    if (st.ready.load(std::memory_order_acquire)) {
      const EngineStats s = st.model.engine->stats();
      text = st.metrics.render(&s);
    } else {
      text = st.metrics.render(nullptr);
    }
    res.status = 200;
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  }

  void tokenize(const httplib::Request&, httplib::Response& res, const RouteContext& ctx) {
    Json body;
    if (auto e = parse_json_body(ctx.body, body)) return send_error(res, *e);
    TokenizeRequest tr;
    if (auto e = parse_tokenize_request(body, tr)) return send_error(res, *e);
    if (auto e = check_model(tr.model, st.cfg.served_model_name)) return send_error(res, *e);
    std::string text = tr.prompt;
    if (tr.has_messages) {
      if (auto e = render_chat_prompt(st, tr.messages, tr.add_generation_prompt, Json(), text))
        return send_error(res, *e);
    }
    const bool add_special = tr.add_special_tokens.value_or(!tr.has_messages);
    const std::vector<int32_t> ids = st.model.tokenizer->encode(text, add_special, /*parse_special=*/true);
    Json out;
    out["count"] = ids.size();
    out["max_model_len"] = st.model.max_model_len;
    out["tokens"] = ids;
    send_json(res, 200, out);
  }

  void detokenize(const httplib::Request&, httplib::Response& res, const RouteContext& ctx) {
    Json body;
    if (auto e = parse_json_body(ctx.body, body)) return send_error(res, *e);
    DetokenizeRequest dr;
    if (auto e = parse_detokenize_request(body, dr)) return send_error(res, *e);
    if (auto e = check_model(dr.model, st.cfg.served_model_name)) return send_error(res, *e);
    const Tokenizer& tok = *st.model.tokenizer;
    if (auto e = check_token_ids(dr.tokens, tok.n_vocab(), "tokens")) return send_error(res, *e);
    send_json(res, 200, Json{{"prompt", tok.decode(dr.tokens, /*skip_special=*/false)}});
  }

  void setup() {
    const int n_threads = std::max(1, st.cfg.http_threads);
    svr.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
    svr.set_payload_max_length(st.cfg.max_body_bytes);
    svr.set_read_timeout(30, 0);
    svr.set_write_timeout(30, 0);
    svr.set_tcp_nodelay(true);

    const RouteFlags open{.auth = false, .ready = false, .active = false};
    const RouteFlags api{.auth = true, .ready = true, .active = true};
    auto bind = [this](void (Impl::*fn)(const httplib::Request&, httplib::Response&, const RouteContext&)) {
      return [this, fn](const httplib::Request& q, httplib::Response& r, const RouteContext& c) { (this->*fn)(q, r, c); };
    };
    svr.Get("/health", route(open, bind(&Impl::health)));
    svr.Get("/v1/health", route(open, bind(&Impl::health)));
    svr.Get("/metrics", route(open, bind(&Impl::metrics)));
    svr.Get("/v1/models", route(api, bind(&Impl::models)));
    svr.Post("/tokenize", post_route(api, bind(&Impl::tokenize)));
    svr.Post("/detokenize", post_route(api, bind(&Impl::detokenize)));
    svr.Post("/v1/chat/completions", post_route(api, [this](const httplib::Request& q, httplib::Response& r,
                                                            const RouteContext& c) { handle_chat_completions(st, q, r, c); }));
    svr.Post("/v1/completions", post_route(api, [this](const httplib::Request& q, httplib::Response& r,
                                                       const RouteContext& c) { handle_completions(st, q, r, c); }));
    svr.Post("/v1/messages", post_route(api, [this](const httplib::Request& q, httplib::Response& r,
                                                    const RouteContext& c) { handle_messages(st, q, r, c); }));
    svr.Post("/v1/messages/count_tokens", post_route(api, [this](const httplib::Request& q, httplib::Response& r,
                                                                 const RouteContext& c) {
      handle_count_tokens(st, q, r, c);
    }));
    svr.Post("/v1/responses", post_route(api, [this](const httplib::Request& q, httplib::Response& r,
                                                     const RouteContext& c) { handle_responses(st, q, r, c); }));
    auto stored = [this](const httplib::Request& q, httplib::Response& r, const RouteContext& c) {
      handle_stored_response(st, q, r, c);
    };
    const RouteFlags no_model{.auth = true, .ready = false, .active = true};  // answers without the model
    svr.Get(R"(/v1/responses/([^/]+)(?:/input_items)?)", route(no_model, stored));
    svr.Delete(R"(/v1/responses/([^/]+))", route(no_model, stored));
    svr.set_socket_options(listen_socket_options);

    svr.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
      t_request_start = Clock::now();
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // Statuses >= 400 without a body (404 no route, 413 too large, 400 bad request line) get
    // an OpenAI error body; bodies our handlers wrote are left alone.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
      if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
      if (const char* allow = res.status == 404 ? allowed_methods(req.path) : nullptr) {  // known path, other method
        res.status = 405;
        res.set_header("Allow", allow);
        if (!res.has_header("X-Request-Id")) res.set_header("X-Request-Id", request_id_for(req));
        send_route_error(req, res,
                         ApiError{405, "invalid_request_error",
                                  fmt::format("method {} is not allowed for {} (allowed: {})", log_safe(req.method, 16),
                                              req.path, allow),
                                  ""});
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!res.has_header("X-Request-Id")) res.set_header("X-Request-Id", request_id_for(req));
      send_route_error(req, res, error_for_status(req, res.status, st.cfg.max_body_bytes));
      return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      spdlog::error("{} {}: {}", log_safe(req.method, 16), log_safe(req.path), log_safe(what, 1024));
      send_route_error(req, res, server_error("internal error: " + what));
    });
    // Count the status before httplib writes the response: the logger runs only after the
    // write, so a client could read /metrics before its previous response was counted.
    svr.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      try {
        st.metrics.count_http_response(res.status);
      } catch (...) {
      }
    });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      try {
        const bool timed = t_request_start != Clock::time_point{};
        const double ms = timed ? std::chrono::duration<double, std::milli>(Clock::now() - t_request_start).count() : 0;
        t_request_start = Clock::time_point{};
        // Method and path escaped: a client's %0a or ESC cannot start a forged log line.
        if (req.path == "/health" || req.path == "/metrics")
          spdlog::debug("{} {} {} {:.1f} ms", log_safe(req.method, 16), log_safe(req.path), res.status, ms);
        else
          spdlog::info("{} {} {} {:.1f} ms", log_safe(req.method, 16), log_safe(req.path), res.status, ms);
        log_access(req, res, ms);
      } catch (...) {
      }
    });
  }
};

HttpServer::HttpServer(ServerConfig cfg) : impl_(std::make_unique<Impl>(std::move(cfg))) {
  impl_->st.created = unix_seconds_now();
  impl_->setup();
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  Impl& m = *impl_;
  const ServerConfig& c = m.st.cfg;
  if (!c.access_log_path.empty()) {
    m.access_log.open(c.access_log_path, std::ios::app);
    if (!m.access_log.is_open())
      return make_error(StatusCode::kIoError, "cannot open the access log {} for appending", c.access_log_path);
  }
  if (c.port == 0) {
    m.bound_port = m.svr.bind_to_any_port(c.host);
    if (m.bound_port < 0) return make_error(StatusCode::kIoError, "cannot bind {} (any port)", c.host);
  } else {
    if (!m.svr.bind_to_port(c.host, c.port))
      return make_error(StatusCode::kIoError, "cannot bind {}:{} (address in use or not local?)", c.host, c.port);
    m.bound_port = c.port;
  }
  if (!deepen_listen_backlog(m.bound_port))
    spdlog::warn("could not raise the listen backlog on port {}: bursts of connections may be refused", m.bound_port);
  m.listener = std::thread([&m] {
    if (!m.svr.listen_after_bind()) spdlog::error("HTTP server stopped listening");
  });
  return Status::ok();
}

void HttpServer::set_ready(const ServingModel& model) {
  ServerState& st = impl_->st;
  st.model = model;
  const Tokenizer& tok = *model.tokenizer;
  st.bos_token = tok.bos_id() >= 0 ? std::string(tok.token_text(tok.bos_id())) : "";
  st.eos_token = tok.eos_id() >= 0 ? std::string(tok.token_text(tok.eos_id())) : "";
  st.ready.store(true, std::memory_order_release);
}

void HttpServer::begin_shutdown() { impl_->st.stopping.store(true); }

void HttpServer::stop() {
  if (!impl_) return;
  impl_->st.stopping.store(true);
  if (impl_->listener.joinable()) {
    impl_->svr.stop();
    impl_->listener.join();
  }
}

int HttpServer::port() const { return impl_->bound_port; }
bool HttpServer::ready() const { return impl_->st.ready.load(std::memory_order_acquire); }
const ServerConfig& HttpServer::config() const { return impl_->st.cfg; }
ServerMetrics& HttpServer::metrics() { return impl_->st.metrics; }

}  // namespace hs::server
