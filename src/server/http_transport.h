// server/http_transport.h — HTTP/1.x over TCP on a few event-driven io threads (Boost.Asio,
// Beast's parser): what a connection costs, how long a client may take, and how a response
// body that is not ready yet (a generation) reaches the socket without holding a thread.
//
// Owns: the listening socket (SO_REUSEADDR only: a port in use fails at start), the accept
// loop, one Connection per socket (a strand, a read buffer, a deadline timer), request parsing
// under limits (header bytes, body bytes however framed: Content-Length over the cap is refused
// before the body, a chunked body as soon as it passes it; 413), deadlines (the whole header
// within header_timeout_s of the connection or of its first byte; each body read within
// body_read_timeout_s; each write within write_timeout_s; an idle keep-alive connection closes
// after keep_alive_timeout_s), keep-alive and pipelining (requests answered one at a time, in
// order; later pipelined bytes wait in the buffer), HTTP/1.0 (answered as 1.0; a streamed body
// is sent unchunked with `Connection: close`), `Expect: 100-continue`, the connection cap
// (beyond max_connections a connection is still read, marked over_capacity, and closed after
// one answer: the handler decides what it gets, e.g. 503 but /health; beyond twice the cap a
// canned 503 is written without reading), and client disconnects (EOF or a reset while an
// answer is pending aborts it).
//
// Does not own: routes, JSON, authentication, logs — the HttpHandler does. The handler is
// called on the connection's strand and must not block; it answers through the Responder
// (from any thread), and a body that comes later is an AsyncBody pumped on the strand whenever
// its Waker is called (from any thread) and after each write completes, so a slow reader
// slows its producer instead of growing a buffer.
//
// Cost: per idle or slow connection one socket, ~16 KiB of read buffer and a timer; no thread.
// Per request one parse (bytes are copied once from the socket buffer into the parser) and
// one serialization; per streamed piece one post to the strand and one write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hs::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;       // as sent ("GET", "POST", ...)
  std::string target;       // the raw request-target
  std::string path;         // the target's path, percent-decoded
  std::string query;        // after '?', as sent
  int version = 11;         // 10: HTTP/1.0, 11: HTTP/1.1
  HeaderList headers;       // as sent, in order
  std::string body;         // complete (read under the cap)
  std::string remote_addr;  // numeric
  int remote_port = 0;
  bool keep_alive = true;       // the client allows another request on this connection
  bool over_capacity = false;   // the connection came in beyond max_connections
  // The transport could not read the request: the status to answer (400 malformed, 408 not in
  // time, 413 body over the cap, 431 header too large); method/path are set when the head was read.
  int transport_error = 0;
  std::string path_param;   // set by a router for a path with a parameter

  bool has_header(std::string_view name) const;
  std::string get_header_value(std::string_view name) const;  // the first one; "" when absent
};

class HttpResponse;

// A body that is produced after the handler returned, pumped on the connection's strand.
class AsyncBody {
 public:
  virtual ~AsyncBody() = default;
  // Called after the handler's response arrived, after every Waker call and after each write
  // completed, never while a write is in flight. Streamed response (HttpResponse::stream): append
  // the bytes to send now to `out` (the transport frames them); return true when the body is
  // complete. Deferred response: when the result is known, fill `res` (status, headers, body;
  // not `async`) and return true. May throw: the connection is then closed.
  virtual bool pump(HttpResponse& res, std::string& out) = 0;
  // The client went away, a write failed or the server is stopping: drop the work now (cancel
  // engine requests). pump() is not called again.
  virtual void abort() noexcept = 0;
};

class HttpResponse {
 public:
  int status = 200;
  HeaderList headers;  // Content-Length, Transfer-Encoding and Connection are the transport's
  std::string body;
  std::shared_ptr<AsyncBody> async;  // null: `body` is the whole answer
  bool stream = false;               // with `async`: write the head now, the body as it comes
  std::shared_ptr<void> hold;        // kept alive until the exchange ends (e.g. a gauge's guard)

  void set_header(std::string_view name, std::string value);  // replaces
  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
  void set_content(std::string b, std::string_view content_type);
};

// Thread-safe, cheap, may outlive its connection (then it does nothing).
using Waker = std::function<void()>;
// Delivers the handler's response; call exactly once, from any thread.
using Responder = std::function<void(HttpResponse)>;

struct ExchangeInfo {
  double duration_ms = 0;     // from the request's complete head to the last byte written
  size_t body_bytes = 0;      // response body bytes written
  bool client_gone = false;   // the client went away before the answer was complete
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // On the connection's strand: must not block (post blocking work to a pool).
  virtual void handle(std::shared_ptr<HttpRequest> req, Waker wake, Responder respond) = 0;
  // The response's status is final and its head is about to be written (metrics).
  virtual void before_write(const HttpRequest&, const HttpResponse&) {}
  // The exchange ended (written whole, or the client went away); `res` as it was answered.
  virtual void completed(const HttpRequest&, const HttpResponse&, const ExchangeInfo&) {}
};

struct TransportConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: any free port
  int io_threads = 2;
  int max_connections = 1024;         // beyond: over_capacity (one answer, then close)
  size_t max_body_bytes = 8u << 20;   // 413 beyond, however the body is framed
  size_t max_header_bytes = 32u << 10;
  double header_timeout_s = 10;       // the whole request head
  double body_read_timeout_s = 30;    // each read of the body
  double write_timeout_s = 30;        // each write
  double keep_alive_timeout_s = 30;   // idle between requests
};

class HttpTransport {
 public:
  HttpTransport(TransportConfig cfg, HttpHandler& handler);
  ~HttpTransport();  // stop()
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and starts the io threads. An error names the address when it cannot bind.
  Status start();
  // Stops accepting, aborts every exchange (AsyncBody::abort) and closes every connection,
  // then joins the io threads. Idempotent.
  void stop();

  int port() const;            // the bound port
  size_t connections() const;  // open now

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// "%41%0a" → "A\n" (a '%' not followed by two hex digits is kept as is).
std::string percent_decode(std::string_view s);

}  // namespace hs::server
