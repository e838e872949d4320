// server/http_server.cpp — HttpServer: the router over HttpTransport (route table, 404 /
// 405 with Allow, the route wrapper: request id, auth, readiness, the connection cap's 503,
// active-request gauge, exceptions → 500 JSON), where each route runs (cheap ones on the io
// thread, the rest on the WorkerPool), the small routes (health, models, metrics, tokenize,
// detokenize), the transport's own errors (400/408/413/431) as JSON, and one log line per
// request. Chat and text completions are in completion_routes.cpp, Anthropic's /v1/messages in
// messages_route.cpp, OpenAI's /v1/responses in responses_route.cpp; errors on /v1/messages
// paths (auth, 404/405/413, ...) have Anthropic's error shape.
#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>
#include <mutex>

#include "engine/engine.h"
#include "server/anthropic_protocol.h"
#include "server/http_transport.h"
#include "server/openai_response.h"
#include "server/routes.h"
#include "server/worker_pool.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace hs::server {
namespace {

using Clock = std::chrono::steady_clock;

// Compares without an early exit, so the time taken does not reveal how much of the key matched.
bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// A client's X-Request-Id is echoed if it is short printable ASCII; else a fresh one.
std::string request_id_for(const HttpRequest& req) {
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
  bool pooled = true;  // runs on the worker pool (blocking work); else on the io thread
  bool beyond_cap = false;  // answered on a connection beyond --max-connections
};

ApiError error_for_status(const HttpRequest& req, int status, size_t max_body) {
  switch (status) {
    case 400: return invalid_request("malformed HTTP request");
    case 404: return not_found(fmt::format("no route for {} {}", log_safe(req.method, 16), log_safe(req.path)));
    case 408: return ApiError{408, "invalid_request_error", "the request was not received in time", ""};
    case 413: return request_too_large(fmt::format("the request body exceeds the limit of {} bytes", max_body));
    case 414: return ApiError{414, "invalid_request_error", "the request URI is too long", ""};
    case 431: return ApiError{431, "invalid_request_error", "the request header is too large", ""};
    case 499: return ApiError{499, "invalid_request_error", "the client closed the request", ""};
    default: break;
  }
  return ApiError{status, status < 500 ? "invalid_request_error" : "server_error", fmt::format("HTTP {}", status), ""};
}

// Anthropic's routes answer errors in Anthropic's shape (the SDKs read error.type from it).
bool anthropic_path(std::string_view path) { return path == "/v1/messages" || path.starts_with("/v1/messages/"); }

// GET /v1/responses/{id}[/input_items] and DELETE /v1/responses/{id}: the id, or "" when
// `path` is not one of those (input_items: whether it ends so).
std::string stored_response_id(std::string_view path, bool& input_items) {
  constexpr std::string_view kPrefix = "/v1/responses/";
  input_items = false;
  if (!path.starts_with(kPrefix)) return {};
  std::string_view rest = path.substr(kPrefix.size());
  constexpr std::string_view kItems = "/input_items";
  if (rest.size() > kItems.size() && rest.ends_with(kItems)) {
    rest.remove_suffix(kItems.size());
    input_items = true;
  }
  if (rest.empty() || rest.find('/') != std::string_view::npos) return {};
  return std::string(rest);
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

void send_json(HttpResponse& res, int status, const Json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(HttpResponse& res, const ApiError& e) { send_json(res, e.status, api_error_json(e)); }

namespace {
// An error in the shape of the API `req` was sent to (X-Request-Id already set, if any).
void send_route_error(const HttpRequest& req, HttpResponse& res, const ApiError& e) {
  if (anthropic_path(req.path))
    return send_json(res, e.status, anthropic_error_json(e, res.get_header_value("X-Request-Id")));
  send_error(res, e);
}
}  // namespace

struct HttpServer::Impl final : HttpHandler {
  using Fn = std::function<void(const HttpRequest&, HttpResponse&, const RouteContext&)>;
  struct Route {
    std::string_view method;
    std::string_view path;  // exact; "" for the stored-response routes (matched by prefix)
    RouteFlags flags;
    Fn fn;
  };

  explicit Impl(ServerConfig cfg)
      : st(std::move(cfg)), workers(st.cfg.http_threads), transport(transport_config(st.cfg), *this) {}

  static TransportConfig transport_config(const ServerConfig& c) {
    TransportConfig t;
    t.host = c.host;
    t.port = c.port;
    t.io_threads = c.io_threads;
    t.max_connections = c.max_connections;
    t.max_body_bytes = c.max_body_bytes;
    t.header_timeout_s = c.header_timeout_s;
    t.body_read_timeout_s = c.body_read_timeout_s;
    t.write_timeout_s = c.write_timeout_s;
    t.keep_alive_timeout_s = c.keep_alive_timeout_s;
    return t;
  }

  ServerState st;
  WorkerPool workers;
  std::vector<Route> routes;
  // --access-log: one JSON object per request (every client string JSON-escaped), appended and
  // flushed per line under a mutex (the io threads log concurrently).
  std::mutex access_mu;
  std::ofstream access_log;
  HttpTransport transport;  // last: it calls into the members above until stop()

  void log_access(const HttpRequest& req, const HttpResponse& res, double ms, size_t body_bytes) {
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
    if (body_bytes > 0) j["response_bytes"] = body_bytes;
    if (req.has_header("User-Agent")) j["user_agent"] = req.get_header_value("User-Agent");
    // Invalid UTF-8 from a client is replaced, never a throw (or a raw byte in the log).
    const std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace);
    std::lock_guard lk(access_mu);
    access_log << line << '\n';
    access_log.flush();
  }

  // `Authorization: Bearer KEY` (OpenAI clients) or `x-api-key: KEY` (Anthropic clients);
  // `anthropic-version` and other headers are not looked at.
  bool authorized(const HttpRequest& req) const {
    if (st.cfg.api_key.empty()) return true;
    bool ok = false;
    if (req.has_header("x-api-key")) ok = constant_time_equal(req.get_header_value("x-api-key"), st.cfg.api_key);
    const std::string h = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (h.size() > kBearer.size() && std::string_view(h).substr(0, kBearer.size()) == kBearer)
      ok = constant_time_equal(std::string_view(h).substr(kBearer.size()), st.cfg.api_key) || ok;
    return ok;
  }

  // ---- HttpHandler ----
  void handle(std::shared_ptr<HttpRequest> req, Waker wake, Responder respond) override {
    HttpResponse res;
    res.set_header("X-Request-Id", request_id_for(*req));
    if (req->transport_error != 0) {
      send_route_error(*req, res, error_for_status(*req, req->transport_error, st.cfg.max_body_bytes));
      return respond(std::move(res));
    }
    bool input_items = false;
    const Route* route = nullptr;
    std::string allow;
    for (const Route& r : routes) {
      const bool match = r.path.empty() ? !stored_response_id(req->path, input_items).empty() &&
                                              !(r.method == "DELETE" && input_items)
                                        : req->path == r.path;
      if (!match) continue;
      if (req->method == r.method) {
        route = &r;
        break;
      }
      if (!allow.empty()) allow += ", ";
      allow += r.method;
    }
    if (!route) {
      if (!allow.empty()) {  // a known path asked with another method
        res.set_header("Allow", allow);
        send_route_error(*req, res,
                         ApiError{405, "invalid_request_error",
                                  fmt::format("method {} is not allowed for {} (allowed: {})", log_safe(req->method, 16),
                                              log_safe(req->path), allow),
                                  ""});
      } else {
        send_route_error(*req, res, error_for_status(*req, 404, st.cfg.max_body_bytes));
      }
      return respond(std::move(res));
    }
    if (route->path.empty()) req->path_param = stored_response_id(req->path, input_items);
    const RouteFlags flags = route->flags;
    if (req->over_capacity && !flags.beyond_cap) {
      res.set_header("Retry-After", "1");
      send_route_error(*req, res,
                       unavailable(fmt::format("too many open connections (the limit is {}); retry later",
                                               st.cfg.max_connections)));
      return respond(std::move(res));
    }
    // The gauge, from now until the exchange ends (the answer written, or the client gone).
    struct Active {
      ServerMetrics& m;
      explicit Active(ServerMetrics& mm) : m(mm) { m.http_request_begin(); }
      ~Active() { m.http_request_end(); }
    };
    std::shared_ptr<void> active = flags.active ? std::make_shared<Active>(st.metrics) : nullptr;
    res.hold = active;
    if (flags.auth && !authorized(*req)) {
      send_route_error(*req, res,
                       authentication_error("missing or invalid API key (Authorization: Bearer <key> or "
                                            "x-api-key: <key>)"));
      return respond(std::move(res));
    }
    if (flags.ready && st.stopping.load()) {
      send_route_error(*req, res, unavailable("the server is shutting down"));
      return respond(std::move(res));
    }
    if (flags.ready && !st.ready.load(std::memory_order_acquire)) {
      send_route_error(*req, res, unavailable("Loading model"));
      return respond(std::move(res));
    }
    auto run = [this, fn = route->fn, req, wake = std::move(wake), respond, res = std::move(res)]() mutable {
      RouteContext ctx{res.get_header_value("X-Request-Id"), Clock::now(), std::move(req->body), std::move(wake)};
      try {
        fn(*req, res, ctx);
      } catch (const std::exception& e) {
        spdlog::error("{} {}: {}", log_safe(req->method, 16), log_safe(req->path), log_safe(e.what(), 1024));
        res.async.reset();
        res.stream = false;
        send_route_error(*req, res, server_error(fmt::format("internal error: {}", e.what())));
      } catch (...) {
        res.async.reset();
        res.stream = false;
        send_route_error(*req, res, server_error("internal error"));
      }
      respond(std::move(res));
    };
    if (!flags.pooled) return run();
    if (!workers.post(std::move(run))) {
      HttpResponse busy;
      busy.set_header("X-Request-Id", request_id_for(*req));
      send_route_error(*req, busy, unavailable("the server is shutting down"));
      respond(std::move(busy));
    }
  }

  // Count the status before the response is written: a client could otherwise read /metrics
  // before its previous response was counted.
  void before_write(const HttpRequest&, const HttpResponse& res) override {
    try {
      st.metrics.count_http_response(res.status);
    } catch (...) {
    }
  }

  void completed(const HttpRequest& req, const HttpResponse& res, const ExchangeInfo& info) override {
    // Method and path escaped: a client's %0a or ESC cannot start a forged log line.
    if (req.path == "/health" || req.path == "/metrics")
      spdlog::debug("{} {} {} {:.1f} ms", log_safe(req.method, 16), log_safe(req.path), res.status, info.duration_ms);
    else
      spdlog::info("{} {} {} {:.1f} ms{}", log_safe(req.method, 16), log_safe(req.path), res.status, info.duration_ms,
                   info.client_gone ? " (client gone)" : "");
    log_access(req, res, info.duration_ms, info.body_bytes);
  }

  // ---- routes ----
  void health(const HttpRequest&, HttpResponse& res, const RouteContext&) {
    if (st.ready.load(std::memory_order_acquire) && !st.stopping.load())
      return send_json(res, 200, Json{{"status", "ok"}});
    send_error(res, unavailable(st.stopping.load() ? "Shutting down: draining the requests in flight" : "Loading model"));
  }

  void models(const HttpRequest&, HttpResponse& res, const RouteContext&) {
    Json m;
    m["id"] = st.cfg.served_model_name;
    m["object"] = "model";
    m["created"] = st.created;
    m["owned_by"] = "hindsight";
    m["max_model_len"] = st.model.max_model_len;
    send_json(res, 200, Json{{"object", "list"}, {"data", Json::array({std::move(m)})}});
  }

  void metrics(const HttpRequest&, HttpResponse& res, const RouteContext&) {
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

  void tokenize(const HttpRequest&, HttpResponse& res, const RouteContext& ctx) {
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

  void detokenize(const HttpRequest&, HttpResponse& res, const RouteContext& ctx) {
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
    const RouteFlags open{.auth = false, .ready = false, .active = false, .pooled = false, .beyond_cap = true};
    const RouteFlags api{.auth = true, .ready = true, .active = true, .pooled = true};
    const RouteFlags api_inline{.auth = true, .ready = true, .active = true, .pooled = false};
    const RouteFlags no_model{.auth = true, .ready = false, .active = true, .pooled = false};  // answers without the model
    auto member = [this](void (Impl::*fn)(const HttpRequest&, HttpResponse&, const RouteContext&)) -> Fn {
      return [this, fn](const HttpRequest& q, HttpResponse& r, const RouteContext& c) { (this->*fn)(q, r, c); };
    };
    using Handler = void (*)(ServerState&, const HttpRequest&, HttpResponse&, const RouteContext&);
    auto free_fn = [this](Handler h) -> Fn {
      return [this, h](const HttpRequest& q, HttpResponse& r, const RouteContext& c) { h(st, q, r, c); };
    };
    routes = {
        {"GET", "/health", open, member(&Impl::health)},
        {"GET", "/v1/health", open, member(&Impl::health)},
        {"GET", "/metrics", open, member(&Impl::metrics)},
        {"GET", "/v1/models", api_inline, member(&Impl::models)},
        {"POST", "/tokenize", api, member(&Impl::tokenize)},
        {"POST", "/detokenize", api, member(&Impl::detokenize)},
        {"POST", "/v1/chat/completions", api, free_fn(&handle_chat_completions)},
        {"POST", "/v1/completions", api, free_fn(&handle_completions)},
        {"POST", "/v1/messages", api, free_fn(&handle_messages)},
        {"POST", "/v1/messages/count_tokens", api, free_fn(&handle_count_tokens)},
        {"POST", "/v1/responses", api, free_fn(&handle_responses)},
        {"GET", "", no_model, free_fn(&handle_stored_response)},
        {"DELETE", "", no_model, free_fn(&handle_stored_response)},
    };
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
  return m.transport.start();
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
  impl_->workers.join();    // the handlers in progress finish (their answers go to the transport)
  impl_->transport.stop();  // then every exchange still open is aborted and its socket closed
}

int HttpServer::port() const { return impl_->transport.port(); }
bool HttpServer::ready() const { return impl_->st.ready.load(std::memory_order_acquire); }
const ServerConfig& HttpServer::config() const { return impl_->st.cfg; }
ServerMetrics& HttpServer::metrics() { return impl_->st.metrics; }

}  // namespace hs::server
