// tests/unit/server/test_http_server.cpp — the HTTP layer without a model: an HttpServer that
// is still loading (health 503, auth 401, 404/405/413 with OpenAI error bodies, chunked bodies
// under the cap, the port taken, request ids, metrics, the connection cap's 503 with /health
// still answered, pipelining and HTTP/1.0 through the router), the access log and log_safe.
// cpp-httplib's client talks to it: another implementation than the server's.
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
#include <utility>
#include <vector>

#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/routes.h"

namespace hs::server {
namespace {

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
    cfg.max_connections = 8;
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
  // A line is written after its response is sent, by whichever http thread served it: two
  // requests' lines may land in either order (seen under ASan), so each is found by its path.
  if (lines[0]["path"] != "/health") std::swap(lines[0], lines[1]);
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

int connect_local(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Beyond --max-connections: a JSON 503 naming the limit, /health still answered (here it says
// "Loading model": the answer of the route, not of the cap).
TEST_F(LoadingServer, ConnectionCapIs503ButHealthAnswers) {
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {
    held.push_back(connect_local(server_->port()));
    ASSERT_GE(held.back(), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string r = raw_exchange(server_->port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\n\r\n");
  EXPECT_EQ(status_of(r), 503) << r;
  EXPECT_NE(r.find("too many open connections (the limit is 8)"), std::string::npos) << r;
  EXPECT_NE(r.find("Retry-After: 1"), std::string::npos) << r;
  const std::string h = raw_exchange(server_->port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(h), 503) << h;
  EXPECT_NE(h.find("Loading model"), std::string::npos) << h;
  for (int fd : held) close(fd);
}

TEST_F(LoadingServer, PipeliningAndHttp10ThroughTheRouter) {
  const std::string three = raw_exchange(server_->port(),
                                         "GET /health HTTP/1.1\r\nHost: x\r\nX-Request-Id: one\r\n\r\n"
                                         "GET /nope HTTP/1.1\r\nHost: x\r\nX-Request-Id: two\r\n\r\n"
                                         "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Request-Id: three\r\nConnection: close\r\n\r\n");
  const size_t a = three.find("X-Request-Id: one"), b = three.find("X-Request-Id: two"), c = three.find("X-Request-Id: three");
  ASSERT_NE(a, std::string::npos) << three;
  ASSERT_NE(b, std::string::npos) << three;
  ASSERT_NE(c, std::string::npos) << three;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_NE(three.find("HTTP/1.1 404 "), std::string::npos);
  const std::string old = raw_exchange(server_->port(), "GET /health HTTP/1.0\r\n\r\n");
  EXPECT_EQ(old.rfind("HTTP/1.0 503 ", 0), 0u) << old;
  EXPECT_EQ(old.find("chunked"), std::string::npos) << old;
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
