// tests/unit/server/test_http_transport.cpp — HttpTransport under hostile and unusual clients,
// on raw sockets with a test handler (no router, no model): pipelining answered in order,
// HTTP/1.0 answered as 1.0 (a stream unchunked, then closed), chunked streams on keep-alive,
// bodies over the cap (Content-Length and chunked) refused with 413 without reading them,
// `Expect: 100-continue`, the header deadline (total, not per byte), slow-header floods far
// beyond the io thread count, the connection cap (over_capacity, then the canned 503), the
// keep-alive idle timeout, client disconnects aborting a pending body, the port in use.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http_transport.h"

namespace hs::server {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool send_all(int fd, std::string_view s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until the peer closes, `until` appears in what was read, or `timeout` passes.
std::string read_some(int fd, std::chrono::milliseconds timeout, std::string_view until = {}, bool* closed = nullptr) {
  std::string out;
  const auto deadline = Clock::now() + timeout;
  if (closed) *closed = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buf[8192];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
    if (!until.empty() && out.find(until) != std::string::npos) break;
  }
  return out;
}

size_t count_of(const std::string& s, std::string_view what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// A body produced by a test thread: pieces pushed, the waker called after each.
struct TestStream final : AsyncBody {
  std::mutex mu;
  std::vector<std::string> pieces;
  bool done = false;
  std::atomic<bool> aborted{false};
  bool deferred = false;  // fill the response at the end instead of streaming
  bool pump(HttpResponse& res, std::string& out) override {
    std::lock_guard lk(mu);
    if (deferred) {
      if (!done) return false;
      res.status = 200;
      for (auto& p : pieces) res.body += p;
      return true;
    }
    for (auto& p : pieces) out += p;
    pieces.clear();
    return done;
  }
  void abort() noexcept override { aborted = true; }
};

class TestHandler final : public HttpHandler {
 public:
  std::atomic<int> calls{0};
  std::atomic<int> completed_n{0};
  std::shared_ptr<TestStream> last_stream;
  std::mutex mu;
  std::vector<std::thread> threads;
  std::vector<std::string> seen;  // "METHOD path body" per request, in order
  std::atomic<bool> last_over_capacity{false};
  int last_transport_error = 0;

  ~TestHandler() override {
    for (auto& t : threads) t.join();
  }

  void handle(std::shared_ptr<HttpRequest> req, Waker wake, Responder respond) override {
    ++calls;
    {
      std::lock_guard lk(mu);
      seen.push_back(req->method + " " + req->path + " " + req->body);
      last_transport_error = req->transport_error;
    }
    last_over_capacity = req->over_capacity;
    HttpResponse res;
    if (req->transport_error) {
      res.status = req->transport_error;
      res.set_content("{\"error\":" + std::to_string(req->transport_error) + "}", "application/json");
      return respond(std::move(res));
    }
    if (req->over_capacity && req->path != "/health") {
      res.status = 503;
      res.set_content("{\"error\":\"cap\"}", "application/json");
      return respond(std::move(res));
    }
    if (req->path == "/late") {  // answered from another thread after a while
      std::lock_guard lk(mu);
      threads.emplace_back([respond, req] {
        std::this_thread::sleep_for(150ms);
        HttpResponse r;
        r.set_content("late", "text/plain");
        respond(std::move(r));
      });
      return;
    }
    if (req->path == "/stream" || req->path == "/deferred" || req->path == "/forever") {
      auto s = std::make_shared<TestStream>();
      s->deferred = req->path == "/deferred";
      {
        std::lock_guard lk(mu);
        last_stream = s;
        if (req->path != "/forever")
          threads.emplace_back([s, wake] {
            for (int i = 0; i < 3; ++i) {
              std::this_thread::sleep_for(20ms);
              {
                std::lock_guard l2(s->mu);
                s->pieces.push_back("p" + std::to_string(i) + ";");
                s->done = i == 2;
              }
              wake();
            }
          });
      }
      res.set_header("Content-Type", "text/event-stream");
      res.async = s;
      res.stream = !s->deferred;
      return respond(std::move(res));
    }
    res.set_content(req->path.substr(1) + (req->body.empty() ? "" : ":" + req->body), "text/plain");
    respond(std::move(res));
  }
  void completed(const HttpRequest&, const HttpResponse&, const ExchangeInfo&) override { ++completed_n; }
};

class Transport : public ::testing::Test {
 protected:
  void start(TransportConfig cfg = {}) {
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    if (cfg.max_body_bytes == (8u << 20)) cfg.max_body_bytes = 1024;
    transport_ = std::make_unique<HttpTransport>(cfg, handler_);
    const Status s = transport_->start();
    ASSERT_TRUE(s.is_ok()) << s.message();
    port_ = transport_->port();
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (transport_) transport_->stop();
  }
  std::string exchange(const std::string& request, std::chrono::milliseconds timeout = 5s) {
    const int fd = connect_to(port_);
    EXPECT_GE(fd, 0);
    send_all(fd, request);
    std::string r = read_some(fd, timeout);
    close(fd);
    return r;
  }

  TestHandler handler_;
  std::unique_ptr<HttpTransport> transport_;
  int port_ = 0;
};

TEST_F(Transport, PipelinedRequestsAreAnsweredInOrder) {
  start();
  const int fd = connect_to(port_);
  ASSERT_GE(fd, 0);
  // The first is answered late from another thread: the second and third wait their turn.
  ASSERT_TRUE(send_all(fd, "GET /late HTTP/1.1\r\nHost: x\r\n\r\n"
                           "POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                           "GET /three HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  bool closed = false;
  const std::string r = read_some(fd, 5s, {}, &closed);
  close(fd);
  EXPECT_TRUE(closed);
  EXPECT_EQ(count_of(r, "HTTP/1.1 200 OK\r\n"), 3u) << r;
  const size_t a = r.find("\r\n\r\nlate"), b = r.find("\r\n\r\ntwo:abc"), c = r.find("\r\n\r\nthree");
  ASSERT_NE(a, std::string::npos) << r;
  ASSERT_NE(b, std::string::npos) << r;
  ASSERT_NE(c, std::string::npos) << r;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_NE(r.rfind("Connection: close"), std::string::npos);
}

TEST_F(Transport, Http10IsAnsweredAs10) {
  start();
  std::string r = exchange("GET /plain HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Length: 5\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos) << r;
  // A stream to a 1.0 client: no chunked encoding, the body runs until the server closes.
  r = exchange("GET /stream HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << r;
  EXPECT_EQ(r.find("Transfer-Encoding"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\r\n\r\np0;p1;p2;"), std::string::npos) << r;
  // 1.0 with keep-alive asked for keeps the connection for a plain answer.
  const int fd = connect_to(port_);
  send_all(fd, "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  r = read_some(fd, 2s, "\r\n\r\na");
  EXPECT_NE(r.find("Connection: keep-alive\r\n"), std::string::npos) << r;
  send_all(fd, "GET /b HTTP/1.0\r\n\r\n");
  r = read_some(fd, 2s);
  EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << r;
  close(fd);
}

TEST_F(Transport, StreamsAreChunkedAndKeepTheConnection) {
  start();
  const int fd = connect_to(port_);
  send_all(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = read_some(fd, 5s, "0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("3\r\np0;\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("3\r\np2;\r\n0\r\n\r\n"), std::string::npos) << r;
  send_all(fd, "GET /again HTTP/1.1\r\nHost: x\r\n\r\n");
  r = read_some(fd, 2s, "again");
  EXPECT_NE(r.find("\r\n\r\nagain"), std::string::npos) << r;
  close(fd);
  // A deferred body: one answer with a length when it is ready.
  r = exchange("GET /deferred HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(r.find("Content-Length: 9\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("\r\n\r\np0;p1;p2;"), std::string::npos) << r;
}

TEST_F(Transport, ContentLengthOverTheCapIs413BeforeTheBody) {
  start();
  const int fd = connect_to(port_);
  send_all(fd, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n");  // no body follows
  bool closed = false;
  const std::string r = read_some(fd, 3s, {}, &closed);
  close(fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 413 ", 0), 0u) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  EXPECT_TRUE(closed);
  EXPECT_EQ(handler_.last_transport_error, 413);
}

TEST_F(Transport, ChunkedBodyOverTheCapIs413WithoutReadingItAll) {
  start();
  const int fd = connect_to(port_);
  ASSERT_TRUE(send_all(fd, "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  // Keep sending 64 KiB chunks (1 GiB in all, if it were read) while reading the answer.
  std::atomic<bool> stop{false};
  std::atomic<size_t> sent{0};
  std::thread sender([&] {
    const std::string chunk = "10000\r\n" + std::string(65536, 'x') + "\r\n";
    for (int i = 0; i < 16384 && !stop; ++i) {
      if (!send_all(fd, chunk)) break;
      sent += chunk.size();
    }
  });
  const auto t0 = Clock::now();
  const std::string r = read_some(fd, 10s, "}");
  stop = true;
  shutdown(fd, SHUT_RDWR);
  sender.join();
  close(fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 413 ", 0), 0u) << r.substr(0, 200);
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_LT(sent.load(), size_t{64} << 20);  // the server stopped reading long before 1 GiB
  // A chunked body under the cap is read whole.
  const std::string ok = exchange("POST /y HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                                  "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  EXPECT_NE(ok.find("\r\n\r\ny:abcde"), std::string::npos) << ok;
}

TEST_F(Transport, ExpectContinue) {
  start();
  const int fd = connect_to(port_);
  send_all(fd, "POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  std::string r = read_some(fd, 2s, "\r\n\r\n");
  EXPECT_EQ(r, "HTTP/1.1 100 Continue\r\n\r\n");
  send_all(fd, "hi");
  r = read_some(fd, 2s, "e:hi");
  EXPECT_NE(r.find("HTTP/1.1 200 OK"), std::string::npos) << r;
  close(fd);
}

TEST_F(Transport, MalformedRequestIs400) {
  start();
  const std::string r = exchange("GARBAGE\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 400 ", 0), 0u) << r;
  const std::string smuggle = exchange(
      "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(smuggle.rfind("HTTP/1.1 400 ", 0), 0u) << smuggle;
  const std::string big = exchange("GET /x HTTP/1.1\r\nX-Big: " + std::string(40000, 'a') + "\r\n\r\n");
  EXPECT_EQ(big.rfind("HTTP/1.1 431 ", 0), 0u) << big.substr(0, 100);
}

// The header deadline is for the whole head: a client trickling one byte every 100 ms is cut
// off at the deadline, not kept alive by each byte.
TEST_F(Transport, HeaderDeadlineIsTotal) {
  TransportConfig cfg;
  cfg.header_timeout_s = 0.5;
  start(cfg);
  const int fd = connect_to(port_);
  const std::string head = "GET /slow HTTP/1.1\r\nHost: x\r\nX-Padding: " + std::string(100, 'a') + "\r\n\r\n";
  const auto t0 = Clock::now();
  bool refused = false;
  for (char c : head) {
    if (!send_all(fd, std::string_view(&c, 1))) {
      refused = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {  // the server closed (EOF readable)
      refused = true;
      break;
    }
  }
  const auto took = Clock::now() - t0;
  close(fd);
  EXPECT_TRUE(refused);
  EXPECT_LT(took, 2s);
  EXPECT_GE(took, 400ms);
  EXPECT_EQ(handler_.calls.load(), 0);
  // A connection that sends nothing at all is closed too.
  const int idle = connect_to(port_);
  bool closed = false;
  read_some(idle, 3s, {}, &closed);
  close(idle);
  EXPECT_TRUE(closed);
}

// Far more slow-header sockets than io threads: a normal request is still answered at once.
TEST_F(Transport, SlowHeaderFloodDoesNotBlockOthers) {
  TransportConfig cfg;
  cfg.io_threads = 1;
  start(cfg);
  std::vector<int> slow;
  for (int i = 0; i < 300; ++i) {
    const int fd = connect_to(port_);
    ASSERT_GE(fd, 0);
    send_all(fd, "GET /slow HTTP/1.1\r\nHo");
    slow.push_back(fd);
  }
  const auto t0 = Clock::now();
  const std::string r = exchange("GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5s);
  EXPECT_LT(Clock::now() - t0, 1s);
  EXPECT_NE(r.find("\r\n\r\nfast"), std::string::npos) << r;
  for (int fd : slow) close(fd);
}

TEST_F(Transport, ConnectionCap) {
  TransportConfig cfg;
  cfg.max_connections = 4;
  start(cfg);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(connect_to(port_));
    send_all(held.back(), "GET /held HTTP/1.1\r\n");  // a head in progress
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(transport_->connections(), 4u);
  // Beyond the cap: still read, marked, answered once and closed.
  std::string r = exchange("GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 503 ", 0), 0u) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  EXPECT_TRUE(handler_.last_over_capacity.load());
  r = exchange("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 ", 0), 0u) << r;
  // Beyond twice the cap: a canned 503, nothing read.
  for (int i = 0; i < 4; ++i) held.push_back(connect_to(port_));
  std::this_thread::sleep_for(100ms);
  const int calls = handler_.calls.load();
  r = exchange("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 503 ", 0), 0u) << r;
  EXPECT_NE(r.find("too many open connections"), std::string::npos) << r;
  EXPECT_EQ(handler_.calls.load(), calls);
  for (int fd : held) close(fd);
  // Once they are gone, connections are served normally again.
  bool normal = false;
  for (int i = 0; i < 50 && !normal; ++i) {
    std::this_thread::sleep_for(20ms);
    handler_.last_over_capacity = true;
    r = exchange("GET /y HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    normal = r.rfind("HTTP/1.1 200 ", 0) == 0 && !handler_.last_over_capacity.load();
  }
  EXPECT_TRUE(normal) << r;
}

TEST_F(Transport, IdleKeepAliveConnectionsClose) {
  TransportConfig cfg;
  cfg.keep_alive_timeout_s = 0.3;
  start(cfg);
  const int fd = connect_to(port_);
  send_all(fd, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = read_some(fd, 2s, "\r\n\r\na");
  EXPECT_NE(r.find("200 OK"), std::string::npos);
  bool closed = false;
  const auto t0 = Clock::now();
  read_some(fd, 3s, {}, &closed);
  close(fd);
  EXPECT_TRUE(closed);
  EXPECT_LT(Clock::now() - t0, 2s);
}

TEST_F(Transport, ClientGoneAbortsThePendingBody) {
  start();
  const int fd = connect_to(port_);
  send_all(fd, "GET /forever HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string head = read_some(fd, 2s, "\r\n\r\n");
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
  std::shared_ptr<TestStream> s;
  {
    std::lock_guard lk(handler_.mu);
    s = handler_.last_stream;
  }
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->aborted.load());
  close(fd);
  for (int i = 0; i < 100 && !s->aborted.load(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(s->aborted.load());
}

TEST_F(Transport, StopAbortsOpenStreams) {
  start();
  const int fd = connect_to(port_);
  send_all(fd, "GET /forever HTTP/1.1\r\nHost: x\r\n\r\n");
  read_some(fd, 2s, "\r\n\r\n");
  std::shared_ptr<TestStream> s;
  {
    std::lock_guard lk(handler_.mu);
    s = handler_.last_stream;
  }
  ASSERT_TRUE(s);
  transport_->stop();
  EXPECT_TRUE(s->aborted.load());
  EXPECT_EQ(transport_->connections(), 0u);
  close(fd);
}

TEST_F(Transport, PortInUseFailsAtStart) {
  start();
  TestHandler other;
  TransportConfig cfg;
  cfg.port = port_;
  HttpTransport second(cfg, other);
  const Status s = second.start();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(std::to_string(port_)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("in use"), std::string::npos) << s.message();
}

TEST(PercentDecode, DecodesEscapesOnly) {
  EXPECT_EQ(percent_decode("/v1/x%0a%1B%zz%4"), "/v1/x\n\x1b%zz%4");
  EXPECT_EQ(percent_decode("a+b%20c"), "a+b c");
  EXPECT_EQ(percent_decode("%"), "%");
}

}  // namespace
}  // namespace hs::server
