// tests/unit/server/test_http_server.cpp — the HTTP layer without a model: the client-gone
// probe on real sockets, and an HttpServer that is still loading (health 503, auth 401,
// 404/405/413 with OpenAI error bodies, chunked bodies under the cap, the port taken, request
// ids, metrics), and log_safe.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "server/connection_probe.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/routes.h"

namespace hs::server {
namespace {

int local_port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

TEST(ConnectionProbe, FindsTheSocketAndSeesTheClose) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  const int server_port = local_port_of(listener);
  addr.sin_port = htons(static_cast<uint16_t>(server_port));

  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  const int client_port = local_port_of(client);

  EXPECT_EQ(find_socket_fd(server_port, "127.0.0.1", client_port), accepted);
  EXPECT_EQ(find_socket_fd(server_port, "::ffff:127.0.0.1", client_port), accepted);  // v4-mapped spelling
  EXPECT_EQ(find_socket_fd(server_port, "127.0.0.1", client_port + 1 == server_port ? 1 : client_port + 1), -1);
  EXPECT_EQ(find_socket_fd(-1, "127.0.0.1", client_port), -1);

  EXPECT_FALSE(peer_closed(accepted));
  ASSERT_EQ(write(client, "x", 1), 1);  // unread bytes: still connected
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(peer_closed(accepted));
  char c;
  ASSERT_EQ(read(accepted, &c, 1), 1);
  close(client);
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    closed = peer_closed(accepted);
    if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(closed);
  EXPECT_FALSE(peer_closed(-1));
  close(accepted);
  close(listener);
}

// Connects `n` clients to 127.0.0.1:port without the server accepting, then counts how many
// completed handshakes wait in the accept queue (nonblocking accepts).
int queued_connections(int listener, int port, int n) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::vector<int> clients;
  for (int i = 0; i < n; ++i) {
    const int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));  // EINPROGRESS or done
    clients.push_back(c);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    const int a = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
    if (a < 0) break;
    ++accepted;
    close(a);
  }
  for (int c : clients) close(c);
  return accepted;
}

TEST(ConnectionProbe, DeepensTheListenBacklog) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 2), 0);  // as shallow as cpp-httplib's 5, shallower still
  const int port = local_port_of(listener);
  EXPECT_EQ(find_listening_fd(port), listener);
  EXPECT_EQ(find_listening_fd(-1), -1);
  EXPECT_LE(queued_connections(listener, port, 24), 3);  // backlog 2 holds at most 3

  ASSERT_TRUE(deepen_listen_backlog(port));
  EXPECT_EQ(queued_connections(listener, port, 24), 24);
  close(listener);
}

class LoadingServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig cfg;
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.api_key = "sekret";
    cfg.served_model_name = "tiny";
    cfg.max_body_bytes = 1024;
    cfg.http_threads = 4;
    server_ = std::make_unique<HttpServer>(cfg);
    Status s = server_->start();
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_GT(server_->port(), 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }
  void TearDown() override {
    client_.reset();
    server_->stop();
  }

  static Json error_of(const httplib::Result& r, int status) {
    EXPECT_TRUE(r);
    if (!r) return Json();
    EXPECT_EQ(r->status, status) << r->body;
    Json j = Json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error")) << r->body;
    if (!j.is_object() || !j.contains("error")) return Json();
    const Json& e = j["error"];
    EXPECT_TRUE(e.contains("message") && e.contains("type") && e.contains("param") && e.contains("code")) << r->body;
    EXPECT_EQ(e.value("code", 0), status);
    return e;
  }

  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(LoadingServer, HealthSaysLoading) {
  auto r = client_->Get("/health");
  Json e = error_of(r, 503);
  EXPECT_EQ(e["type"], "unavailable_error");
  EXPECT_EQ(e["message"], "Loading model");
  EXPECT_TRUE(r->has_header("X-Request-Id"));
  error_of(client_->Get("/v1/health"), 503);
  EXPECT_FALSE(server_->ready());
}

TEST_F(LoadingServer, AuthBeforeReadiness) {
  Json e = error_of(client_->Get("/v1/models"), 401);
  EXPECT_EQ(e["type"], "authentication_error");
  error_of(client_->Get("/v1/models", {{"Authorization", "Bearer wrong"}}), 401);
  error_of(client_->Get("/v1/models", {{"Authorization", "sekret"}}), 401);
  error_of(client_->Post("/tokenize", R"({"prompt":"x"})", "application/json"), 401);
  const httplib::Headers ok{{"Authorization", "Bearer sekret"}};
  e = error_of(client_->Get("/v1/models", ok), 503);
  EXPECT_EQ(e["type"], "unavailable_error");
  error_of(client_->Post("/v1/chat/completions", ok, R"({"messages":[]})", "application/json"), 503);
  error_of(client_->Post("/v1/completions", ok, R"({"prompt":"x"})", "application/json"), 503);
}

TEST_F(LoadingServer, NotFoundTooLargeAndRequestIds) {
  Json e = error_of(client_->Get("/v1/nope", {{"Authorization", "Bearer sekret"}}), 404);
  EXPECT_EQ(e["type"], "not_found_error");
  const std::string big(4096, 'x');
  e = error_of(client_->Post("/v1/completions", {{"Authorization", "Bearer sekret"}}, big, "application/json"), 413);
  EXPECT_EQ(e["type"], "request_too_large");
  auto r = client_->Get("/health", {{"X-Request-Id", "abc-123"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("X-Request-Id"), "abc-123");
}

// Sends `request` (raw bytes, `Connection: close`) to 127.0.0.1:port and reads the response
// until the server closes or 10 s pass. No half-close: the server reads a client's EOF as the
// client going away.
std::string raw_exchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  size_t off = 0;
  while (off < request.size()) {
    const ssize_t n = send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer (and close) before reading everything
    off += static_cast<size_t>(n);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::string chunked_post(const std::string& path, const std::string& body, size_t chunk) {
  std::string r = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sekret\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  for (size_t i = 0; i < body.size(); i += chunk) {
    const std::string part = body.substr(i, chunk);
    char len[32];
    std::snprintf(len, sizeof len, "%zx\r\n", part.size());
    r += len + part + "\r\n";
  }
  return r + "0\r\n\r\n";
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return -1;
  return std::atoi(response.c_str() + 9);
}

// httplib 0.11 ignores its payload limit for chunked bodies; the POST routes cut them off at
// the cap themselves (413), and a chunked body under the cap is read whole.
TEST_F(LoadingServer, ChunkedBodiesAreCappedToo) {
  const std::string over = chunked_post("/v1/completions", std::string(4096, 'x'), 512);
  const std::string r = raw_exchange(server_->port(), over);
  EXPECT_EQ(status_of(r), 413) << r.substr(0, 300);
  EXPECT_NE(r.find("request_too_large"), std::string::npos) << r.substr(0, 300);
  const std::string under = chunked_post("/v1/completions", R"({"prompt":"x"})", 5);
  const std::string r2 = raw_exchange(server_->port(), under);
  EXPECT_EQ(status_of(r2), 503) << r2.substr(0, 300);  // read, authorized, then "Loading model"
  EXPECT_NE(r2.find("Loading model"), std::string::npos) << r2.substr(0, 300);
  // The server is still serving.
  error_of(client_->Get("/health"), 503);
}

TEST_F(LoadingServer, WrongMethodIs405WithAllow) {
  auto r = client_->Get("/v1/completions", {{"Authorization", "Bearer sekret"}});
  Json e = error_of(r, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  EXPECT_NE(e.value("message", "").find("GET"), std::string::npos);
  r = client_->Post("/health", "", "application/json");
  error_of(r, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET");
  error_of(client_->Delete("/v1/chat/completions"), 405);
  error_of(client_->Get("/v1/nope"), 404);  // unknown paths stay 404
}

// A second server on a port in use fails to start (no SO_REUSEPORT sharing of connections).
TEST_F(LoadingServer, PortInUseFailsClearly) {
  ServerConfig cfg;
  cfg.port = server_->port();
  cfg.http_threads = 2;
  HttpServer second(cfg);
  const Status s = second.start();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(std::to_string(server_->port())), std::string::npos) << s.message();
  error_of(client_->Get("/health"), 503);  // the first one still answers
}

// --access-log: one JSON object per request; a client's control characters stay inside the JSON
// string (escaped), so a line can neither be split nor forged.
TEST(AccessLog, OneJsonObjectPerRequest) {
  char tmpl[] = "/tmp/hs-access-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    ServerConfig cfg;
    cfg.port = 0;
    cfg.http_threads = 2;
    cfg.access_log_path = tmpl;
    HttpServer server(cfg);
    ASSERT_TRUE(server.start().is_ok());
    httplib::Client c("127.0.0.1", server.port());
    ASSERT_TRUE(c.Get("/health", {{"X-Request-Id", "abc"}, {"User-Agent", "t/1"}}));
    ASSERT_TRUE(c.Get("/v1/x%0a{\"status\":200}%1b"));
    server.stop();
  }
  std::FILE* f = std::fopen(tmpl, "r");
  ASSERT_NE(f, nullptr);
  std::vector<Json> lines;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f)) lines.push_back(Json::parse(buf));
  std::fclose(f);
  std::remove(tmpl);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["path"], "/health");
  EXPECT_EQ(lines[0]["status"], 503);
  EXPECT_EQ(lines[0]["request_id"], "abc");
  EXPECT_EQ(lines[0]["user_agent"], "t/1");
  EXPECT_EQ(lines[0]["method"], "GET");
  EXPECT_TRUE(lines[0]["time"].is_string() && lines[0]["duration_ms"].is_number());
  EXPECT_EQ(lines[1]["path"], "/v1/x\n{\"status\":200}\x1b");  // decoded, kept inside one JSON string
  EXPECT_EQ(lines[1]["status"], 404);
}

TEST(AccessLog, UnwritablePathFailsAtStart) {
  ServerConfig cfg;
  cfg.port = 0;
  cfg.access_log_path = "/nonexistent-dir/access.log";
  HttpServer server(cfg);
  const Status s = server.start();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/access.log"), std::string::npos) << s.message();
}

TEST(LogSafe, EscapesWhatCouldForgeALine) {
  EXPECT_EQ(log_safe("/v1/completions"), "/v1/completions");
  EXPECT_EQ(log_safe("/x\n[error] forged"), "/x\\n[error] forged");
  EXPECT_EQ(log_safe("a\rb\tc"), "a\\rb\\tc");
  EXPECT_EQ(log_safe("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(log_safe(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(log_safe("q\"\\"), "q\\\"\\\\");
  EXPECT_EQ(log_safe("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // valid UTF-8 kept
  EXPECT_EQ(log_safe("bad\xc3(\xff"), "bad\\xc3(\\xff");                       // invalid bytes escaped
  EXPECT_EQ(log_safe("\x7f"), "\\x7f");
  EXPECT_EQ(log_safe(std::string(300, 'a'), 10), std::string(10, 'a') + "...");
}

TEST_F(LoadingServer, MetricsArePublic) {
  client_->Get("/health");
  auto r = client_->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // Health and metrics requests do not count: an idle server reads 0.
  EXPECT_NE(r->body.find("hindsight:http_requests_active{model_name=\"tiny\"} 0\n"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("hindsight:http_requests_total{model_name=\"tiny\",status=\"503\"}"), std::string::npos);
  EXPECT_NE(r->body.find("hindsight:time_to_first_token_seconds_bucket"), std::string::npos);
}

}  // namespace
}  // namespace hs::server
