// server/http_transport.cpp — see http_transport.h. Boost.Asio for sockets and timers, Beast's
// request parser fed by hand (basic_parser::put) so that one read loop owns the socket: the
// same loop reads the next request, notices a client that went away while its answer is
// pending, and buffers pipelined requests (bounded) until their turn.
#include "server/http_transport.h"

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/beast/http.hpp>

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace hs::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

const std::string* find_header(const HeaderList& h, std::string_view name) {
  for (const auto& [k, v] : h)
    if (iequals(k, name)) return &v;
  return nullptr;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status < 400 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

// A header name or value as written: CR, LF and NUL (response splitting) become spaces.
void append_clean(std::string& out, std::string_view s) {
  for (char c : s) out += (c == '\r' || c == '\n' || c == '\0') ? ' ' : c;
}

bool is_transport_header(std::string_view name) {
  return iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") || iequals(name, "Connection");
}

enum class Framing { kLength, kChunked, kUntilClose };

std::string response_head(int version, const HttpResponse& r, Framing framing, size_t length, bool keep_alive) {
  std::string h;
  h.reserve(256);
  h += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  h += std::to_string(r.status);
  h += ' ';
  h += reason_phrase(r.status);
  h += "\r\n";
  for (const auto& [k, v] : r.headers) {
    if (is_transport_header(k)) continue;
    append_clean(h, k);
    h += ": ";
    append_clean(h, v);
    h += "\r\n";
  }
  if (framing == Framing::kLength) h += "Content-Length: " + std::to_string(length) + "\r\n";
  if (framing == Framing::kChunked) h += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive) h += "Connection: close\r\n";
  else if (version == 10) h += "Connection: keep-alive\r\n";
  h += "\r\n";
  return h;
}

std::string chunk_frame(std::string_view data) {
  std::string out = fmt::format("{:x}\r\n", data.size());
  out.append(data);
  out += "\r\n";
  return out;
}

std::chrono::milliseconds ms_of(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.001, seconds) * 1000.0));
}

constexpr size_t kReadChunk = 16 << 10;
constexpr size_t kMaxPipelined = 64 << 10;  // bytes read ahead while an answer is pending
constexpr auto kLingerTime = std::chrono::seconds(2);

std::string canned_overload() {
  const std::string body =
      R"({"error":{"message":"too many open connections; retry later","type":"unavailable_error","param":null,"code":503}})";
  return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace

bool HttpRequest::has_header(std::string_view name) const { return find_header(headers, name) != nullptr; }
std::string HttpRequest::get_header_value(std::string_view name) const {
  const std::string* v = find_header(headers, name);
  return v ? *v : std::string();
}

void HttpResponse::set_header(std::string_view name, std::string value) {
  for (auto& [k, v] : headers)
    if (iequals(k, name)) {
      v = std::move(value);
      return;
    }
  headers.emplace_back(std::string(name), std::move(value));
}
std::string HttpResponse::get_header_value(std::string_view name) const {
  const std::string* v = find_header(headers, name);
  return v ? *v : std::string();
}
bool HttpResponse::has_header(std::string_view name) const { return find_header(headers, name) != nullptr; }
void HttpResponse::set_content(std::string b, std::string_view content_type) {
  body = std::move(b);
  set_header("Content-Type", std::string(content_type));
}

std::string percent_decode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

class Connection;

struct HttpTransport::Impl {
  Impl(TransportConfig c, HttpHandler& h)
      : cfg(std::move(c)), handler(h), acceptor(asio::make_strand(ioc)), retry(acceptor.get_executor()) {}

  TransportConfig cfg;
  HttpHandler& handler;
  std::atomic<bool> stopping{false};
  std::atomic<size_t> n_conns{0};
  int bound_port = -1;
  bool started = false;
  // Before the io_context: a connection still queued in it when it is destroyed unregisters here.
  std::mutex reg_mu;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> registry;

  asio::io_context ioc;
  tcp::acceptor acceptor;
  asio::steady_timer retry;  // after EMFILE: accept again a little later
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;

  // Posts shutdown() to every live connection (idempotent); the number posted.
  size_t shut_all();
  void accept();
  void on_accept(const boost::system::error_code& ec, tcp::socket sock);
};

// One TCP connection: one request at a time, in order; state changes on its strand only.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Mode { kNormal, kOverCapacity, kReject };

  Connection(HttpTransport::Impl& t, tcp::socket sock, Mode mode)
      : t_(t), sock_(std::move(sock)), read_timer_(sock_.get_executor()), write_timer_(sock_.get_executor()),
        mode_(mode) {
    t_.n_conns.fetch_add(1);
    boost::system::error_code ec;
    const tcp::endpoint ep = sock_.remote_endpoint(ec);
    if (!ec) {
      remote_addr_ = ep.address().to_string();
      remote_port_ = ep.port();
    }
    sock_.set_option(tcp::no_delay(true), ec);
  }
  ~Connection() {
    {
      std::lock_guard lk(t_.reg_mu);
      t_.registry.erase(this);
    }
    t_.n_conns.fetch_sub(1);
  }

  void start() {
    if (mode_ == Mode::kReject) {  // beyond twice the cap: a canned answer, nothing read
      close_after_ = true;
      finishing_ = true;
      state_ = State::kExchange;
      queue_write(canned_overload());
      return;
    }
    begin_head(/*fresh=*/true);
    pump_input();
  }

  // From stop(): abort whatever is pending and close now.
  void shutdown() {
    abort_exchange(/*client_gone=*/false);
    hard_close();
  }
  tcp::socket::executor_type executor() { return sock_.get_executor(); }

  Waker make_waker() {
    std::weak_ptr<Connection> weak = weak_from_this();
    return [weak] {
      auto self = weak.lock();
      if (!self || self->wake_posted_.exchange(true)) return;
      asio::post(self->sock_.get_executor(), [self] {
        self->wake_posted_.store(false);
        self->pump_body();
      });
    };
  }

 private:
  enum class State { kIdle, kHead, kBody, kExchange, kLinger, kClosed };

  // ---- reading ----
  void begin_head(bool fresh) {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(t_.cfg.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(static_cast<std::uint64_t>(t_.cfg.max_body_bytes));
    parser_->eager(false);
    continue_sent_ = false;
    if (fresh || unparsed() > 0) {
      state_ = State::kHead;
      arm_read_timer(t_.cfg.header_timeout_s);
    } else {
      state_ = State::kIdle;
      arm_read_timer(t_.cfg.keep_alive_timeout_s);
    }
  }

  size_t unparsed() const { return in_.size() - in_off_; }

  // Parses what is buffered, then reads more if this state wants it.
  void pump_input() {
    if (state_ == State::kIdle && unparsed() > 0) {
      state_ = State::kHead;
      arm_read_timer(t_.cfg.header_timeout_s);  // the header deadline starts at its first byte
    }
    if (state_ == State::kHead || state_ == State::kBody) parse();
    if (in_off_ > 0 && (in_off_ == in_.size() || in_off_ > (64u << 10))) {
      in_.erase(0, in_off_);
      in_off_ = 0;
    }
    maybe_read();
  }

  void maybe_read() {
    if (reading_ || state_ == State::kClosed || peer_eof_) return;
    if (state_ == State::kExchange && unparsed() >= kMaxPipelined) return;  // wait for our turn
    reading_ = true;
    sock_.async_read_some(asio::buffer(rbuf_), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                           size_t n) { self->on_read(ec, n); });
  }

  void on_read(const boost::system::error_code& ec, size_t n) {
    reading_ = false;
    if (state_ == State::kClosed) return;
    if (n > 0) in_.append(rbuf_.data(), n);
    if (state_ == State::kLinger) {  // discard until the client closes or the linger time ends
      in_.clear();
      in_off_ = 0;
      if (ec) return hard_close();
      return maybe_read();
    }
    if (ec) peer_eof_ = true;
    if (state_ == State::kBody && n > 0) arm_read_timer(t_.cfg.body_read_timeout_s);  // per body read
    if (state_ == State::kExchange) {
      if (peer_eof_) {  // the client went away while its answer was pending
        abort_exchange(/*client_gone=*/true);
        return hard_close();
      }
      return maybe_read();
    }
    pump_input();
    if (peer_eof_ && (state_ == State::kIdle || state_ == State::kHead || state_ == State::kBody)) hard_close();
  }

  void parse() {
    while ((state_ == State::kHead || state_ == State::kBody) && unparsed() > 0) {
      beast::error_code ec;
      const size_t used = parser_->put(asio::const_buffer(in_.data() + in_off_, unparsed()), ec);
      in_off_ += used;
      if (ec == bhttp::error::need_more) break;
      if (ec) {
        const int status = ec == bhttp::error::body_limit     ? 413
                           : ec == bhttp::error::header_limit ? 431
                                                              : 400;
        return begin_exchange(status);
      }
      if (state_ == State::kHead && parser_->is_header_done()) {
        state_ = State::kBody;
        arm_read_timer(t_.cfg.body_read_timeout_s);
        if (!parser_->is_done()) maybe_continue();
      }
      if (parser_->is_done()) return begin_exchange(0);
      if (used == 0) break;
    }
  }

  // `Expect: 100-continue` (curl sends it for bodies over 1 KiB): the client waits for this.
  void maybe_continue() {
    const auto& m = parser_->get();
    if (continue_sent_ || m.version() < 11) return;
    const auto it = m.find(bhttp::field::expect);
    if (it == m.end() || !iequals(it->value(), "100-continue")) return;
    continue_sent_ = true;
    queue_write("HTTP/1.1 100 Continue\r\n\r\n");
  }

  // ---- one exchange ----
  void begin_exchange(int transport_error) {
    read_timer_.cancel();
    state_ = State::kExchange;
    auto req = std::make_shared<HttpRequest>();
    req->remote_addr = remote_addr_;
    req->remote_port = remote_port_;
    req->over_capacity = mode_ == Mode::kOverCapacity;
    req->transport_error = transport_error;
    // A Content-Length over the cap is refused as the head completes, before the parser calls
    // its header done: the head is whole then too.
    if (parser_->is_header_done() || transport_error == 413) {
      auto& m = parser_->get();
      req->method = std::string(m.method_string());
      req->target = std::string(m.target());
      const size_t q = req->target.find('?');
      req->path = percent_decode(std::string_view(req->target).substr(0, q));
      if (q != std::string::npos) req->query = req->target.substr(q + 1);
      req->version = m.version() == 10 ? 10 : 11;
      for (const auto& f : m) req->headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      req->keep_alive = m.keep_alive();
      if (transport_error == 0) req->body = std::move(m.body());
    } else {
      req->keep_alive = false;
    }
    if (transport_error != 0) {
      req->keep_alive = false;
      close_after_ = true;  // the rest of what the client sends is not a request
    }
    parser_.reset();
    req_ = req;
    t0_ = Clock::now();
    have_response_ = false;
    async_done_ = false;
    finishing_ = false;
    body_bytes_ = 0;
    ++seq_;
    std::weak_ptr<Connection> weak = weak_from_this();
    const uint64_t seq = seq_;
    Responder respond = [weak, seq](HttpResponse res) {
      auto self = weak.lock();
      if (!self) {
        if (res.async) res.async->abort();
        return;
      }
      asio::post(self->sock_.get_executor(), [self, seq, res = std::move(res)]() mutable {
        self->on_response(seq, std::move(res));
      });
    };
    try {
      t_.handler.handle(req, make_waker(), std::move(respond));
    } catch (const std::exception& e) {
      spdlog::error("HTTP handler failed: {}", e.what());
      return hard_close();
    }
    if (transport_error == 0) maybe_read();  // watch for the client going away; read ahead a little
  }

  void on_response(uint64_t seq, HttpResponse res) {
    if (seq != seq_ || state_ != State::kExchange || have_response_) {
      if (res.async) res.async->abort();
      return;
    }
    have_response_ = true;
    res_ = std::move(res);
    if (!res_.async) return write_whole();
    if (res_.stream) {
      write_stream_head();
      return pump_body();
    }
    pump_body();  // deferred: maybe it is already done
  }

  bool keep_alive_after() const {
    return req_ && req_->keep_alive && !close_after_ && mode_ == Mode::kNormal && !t_.stopping.load() &&
           !iequals(res_.get_header_value("Connection"), "close");
  }

  void write_whole() {
    t_.handler.before_write(*req_, res_);
    const bool keep = keep_alive_after();
    if (!keep) close_after_ = true;
    std::string out = response_head(req_->version, res_, Framing::kLength, res_.body.size(), keep);
    out += res_.body;
    body_bytes_ = res_.body.size();
    finishing_ = true;
    queue_write(std::move(out));
  }

  void write_stream_head() {
    t_.handler.before_write(*req_, res_);
    // HTTP/1.0 has no chunked encoding: the body runs until the connection closes.
    chunked_ = req_->version >= 11;
    const bool keep = chunked_ && keep_alive_after();
    if (!keep) close_after_ = true;
    queue_write(response_head(req_->version, res_, chunked_ ? Framing::kChunked : Framing::kUntilClose, 0, keep));
  }

  void pump_body() {
    if (state_ != State::kExchange || !have_response_ || !res_.async || async_done_ || writing_) return;
    std::string piece;
    bool done = false;
    try {
      done = res_.async->pump(res_, piece);
    } catch (const std::exception& e) {
      spdlog::error("HTTP response body failed: {}", e.what());
      abort_exchange(false);
      return hard_close();
    }
    if (!res_.stream) {
      if (!done) return;
      async_done_ = true;
      return write_whole();
    }
    std::string out;
    if (!piece.empty()) {
      body_bytes_ += piece.size();
      out = chunked_ ? chunk_frame(piece) : std::move(piece);
    }
    if (done) {
      async_done_ = true;
      finishing_ = true;
      if (chunked_) out += "0\r\n\r\n";
    }
    if (!out.empty()) queue_write(std::move(out));
    else if (finishing_ && !writing_) end_exchange();
  }

  // ---- writing ----
  void queue_write(std::string bytes) {
    out_pending_ += bytes;
    start_write();
  }

  void start_write() {
    if (writing_ || out_pending_.empty() || state_ == State::kClosed) return;
    out_flight_.swap(out_pending_);
    out_pending_.clear();
    writing_ = true;
    write_timer_.expires_after(ms_of(t_.cfg.write_timeout_s));
    write_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->state_ == State::kClosed || !self->writing_) return;
      if (self->write_timer_.expiry() > Clock::now()) return;
      spdlog::debug("HTTP write timed out ({}:{}); closing", self->remote_addr_, self->remote_port_);
      self->abort_exchange(/*client_gone=*/true);
      self->hard_close();
    });
    asio::async_write(sock_, asio::buffer(out_flight_),
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) { self->on_write(ec); });
  }

  void on_write(const boost::system::error_code& ec) {
    writing_ = false;
    write_timer_.cancel();
    out_flight_.clear();
    if (state_ == State::kClosed) return;
    if (ec) {
      abort_exchange(/*client_gone=*/true);
      return hard_close();
    }
    if (!out_pending_.empty()) return start_write();
    if (state_ != State::kExchange) return;
    if (!finishing_) return pump_body();
    end_exchange();
  }

  void end_exchange() {
    if (req_) {
      ExchangeInfo info;
      info.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
      info.body_bytes = body_bytes_;
      try {
        t_.handler.completed(*req_, res_, info);
      } catch (...) {
      }
    }
    req_.reset();
    res_ = HttpResponse{};
    have_response_ = false;
    if (close_after_ || peer_eof_) return graceful_close();
    begin_head(/*fresh=*/false);
    pump_input();
  }

  // The exchange in progress ends without its answer (client gone, write failed, stopping).
  void abort_exchange(bool client_gone) {
    if (state_ != State::kExchange || !req_) return;
    if (res_.async && !async_done_) {
      async_done_ = true;
      res_.async->abort();
    }
    ExchangeInfo info;
    info.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
    info.body_bytes = body_bytes_;
    info.client_gone = client_gone;
    if (!have_response_) res_.status = 499;  // nginx's "client closed request"; nobody reads it
    try {
      t_.handler.completed(*req_, res_, info);
    } catch (...) {
    }
    req_.reset();
    res_ = HttpResponse{};
    have_response_ = false;
    ++seq_;  // a response still on its way is dropped (and its body aborted)
  }

  // ---- closing ----
  // After the last byte of a `Connection: close` answer: no more sending, then read and drop
  // what the client still sends (an unread body) for a moment, so that closing does not reset
  // the connection before the client has read the answer.
  void graceful_close() {
    boost::system::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec || peer_eof_) return hard_close();
    state_ = State::kLinger;
    read_timer_.expires_after(kLingerTime);
    read_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
      if (!e && self->state_ == State::kLinger) self->hard_close();
    });
    maybe_read();
  }

  void hard_close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    boost::system::error_code ec;
    read_timer_.cancel();
    write_timer_.cancel();
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
  }

  void arm_read_timer(double seconds) {
    read_timer_.expires_after(ms_of(seconds));
    read_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return;
      Connection& c = *self;
      if (c.read_timer_.expiry() > Clock::now()) return;
      if (c.state_ == State::kHead || c.state_ == State::kBody || c.state_ == State::kIdle) {
        if (c.state_ != State::kIdle)
          spdlog::debug("HTTP {} deadline passed ({}:{}); closing", c.state_ == State::kHead ? "header" : "body read",
                        c.remote_addr_, c.remote_port_);
        c.hard_close();
      }
    });
  }

  HttpTransport::Impl& t_;
  tcp::socket sock_;
  asio::steady_timer read_timer_, write_timer_;
  Mode mode_;
  State state_ = State::kIdle;
  std::string remote_addr_;
  int remote_port_ = 0;

  std::array<char, kReadChunk> rbuf_{};
  std::string in_;      // bytes read and not yet parsed from in_off_ on
  size_t in_off_ = 0;
  bool reading_ = false, peer_eof_ = false;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool continue_sent_ = false;

  std::shared_ptr<HttpRequest> req_;
  HttpResponse res_;
  uint64_t seq_ = 0;
  bool have_response_ = false, async_done_ = false, finishing_ = false, chunked_ = true, close_after_ = false;
  Clock::time_point t0_;
  size_t body_bytes_ = 0;
  std::atomic<bool> wake_posted_{false};

  bool writing_ = false;
  std::string out_pending_, out_flight_;
};

void HttpTransport::Impl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](const boost::system::error_code& ec, tcp::socket sock) {
    on_accept(ec, std::move(sock));
  });
}

void HttpTransport::Impl::on_accept(const boost::system::error_code& ec, tcp::socket sock) {
  if (stopping.load() || !acceptor.is_open()) return;
  if (ec) {
    if (ec == asio::error::operation_aborted) return;
    // Out of file descriptors (or a transient error): try again shortly instead of spinning.
    spdlog::warn("HTTP accept failed: {}; retrying", ec.message());
    retry.expires_after(std::chrono::milliseconds(50));
    retry.async_wait([this](const boost::system::error_code& e) {
      if (!e && !stopping.load()) accept();
    });
    return;
  }
  const size_t open = n_conns.load();
  const size_t cap = static_cast<size_t>(std::max(1, cfg.max_connections));
  const Connection::Mode mode = open < cap         ? Connection::Mode::kNormal
                                : open < 2 * cap ? Connection::Mode::kOverCapacity
                                                  : Connection::Mode::kReject;
  auto c = std::make_shared<Connection>(*this, std::move(sock), mode);
  {
    std::lock_guard lk(reg_mu);
    registry.emplace(c.get(), c);
  }
  asio::dispatch(c->executor(), [c] { c->start(); });
  accept();
}

size_t HttpTransport::Impl::shut_all() {
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard lk(reg_mu);
    for (auto& [p, w] : registry)
      if (auto c = w.lock()) live.push_back(std::move(c));
  }
  for (auto& c : live) asio::post(c->executor(), [c] { c->shutdown(); });
  return std::max(live.size(), n_conns.load());
}

HttpTransport::HttpTransport(TransportConfig cfg, HttpHandler& handler)
    : impl_(std::make_unique<Impl>(std::move(cfg), handler)) {}

HttpTransport::~HttpTransport() { stop(); }

Status HttpTransport::start() {
  Impl& m = *impl_;
  if (m.started) return Status::ok();
  // Every connection is a descriptor: lift the soft limit to the hard one (often 1024 → 1M).
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  const TransportConfig& c = m.cfg;
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(c.host == "localhost" ? "127.0.0.1" : c.host, ec);
  if (ec) return make_error(StatusCode::kInvalidArgument, "cannot listen on '{}': not an IP address", c.host);
  const tcp::endpoint ep(addr, static_cast<unsigned short>(c.port));
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);  // not SO_REUSEPORT
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    m.acceptor.close(ignored);
    return make_error(StatusCode::kIoError, "cannot listen on {}:{}: {}{}", c.host, c.port, ec.message(),
                      ec == asio::error::address_in_use ? " (another process has the port; pick another with --port)"
                                                        : "");
  }
  m.bound_port = m.acceptor.local_endpoint().port();
  m.work.emplace(asio::make_work_guard(m.ioc));
  m.accept();
  const int n = std::max(1, c.io_threads);
  for (int i = 0; i < n; ++i) m.threads.emplace_back([&m] { m.ioc.run(); });
  m.started = true;
  return Status::ok();
}

void HttpTransport::stop() {
  Impl& m = *impl_;
  if (!m.started || m.stopping.exchange(true)) return;
  asio::post(m.acceptor.get_executor(), [&m] {
    boost::system::error_code ec;
    m.acceptor.close(ec);
    m.retry.cancel();
  });
  // The connections end as their pending operations complete (aborted). Asked again every
  // few milliseconds: one accepted while the acceptor was closing is caught too.
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (m.shut_all() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  m.work.reset();
  m.ioc.stop();
  for (auto& t : m.threads) t.join();
  m.threads.clear();
  // Handlers still queued (a late response) run here, on closed sockets, and release what they hold.
  m.ioc.restart();
  m.ioc.poll();
}

int HttpTransport::port() const { return impl_->bound_port; }
size_t HttpTransport::connections() const { return impl_->n_conns.load(); }

}  // namespace hs::server
