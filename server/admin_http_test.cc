// The admin endpoint over loopback with raw sockets: what Prometheus and probes send, and what
// they must never be able to do to it (malformed, oversized, slow requests).
#include "server/admin_http.h"

#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/raw_socket.h"

namespace waav::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using waav::testing::ConnectTcp;
using waav::testing::RawRequest;
using waav::testing::SendAndReadAll;

class AdminHttpTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(std::chrono::milliseconds(300)); }

  void StartServer(std::chrono::milliseconds timeout) {
    server_.reset();
    AdminHttpOptions options;
    options.address = "127.0.0.1:0";
    options.max_request_bytes = 1024;
    options.timeout = timeout;
    options.max_connections = 4;
    auto server = AdminHttpServer::Start(
        options, {.metrics = [] { return std::string("# TYPE x counter\nx 1\n"); },
                  .ready = [this] { return ready_.load(); }});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = server_->address();
  }

  std::string Get(const std::string& path, const std::string& method = "GET") {
    return RawRequest(address_, method + " " + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
  }

  std::atomic<bool> ready_{false};
  std::unique_ptr<AdminHttpServer> server_;
  std::string address_;
};

TEST_F(AdminHttpTest, MetricsInTheExpositionFormat) {
  const std::string response = Get("/metrics");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(response, HasSubstr("Content-Length: 21\r\n"));
  EXPECT_TRUE(absl::EndsWith(response, "\r\n\r\n# TYPE x counter\nx 1\n")) << response;
  // A query string does not change the path.
  EXPECT_THAT(Get("/metrics?name[]=x"), StartsWith("HTTP/1.1 200 OK"));
}

TEST_F(AdminHttpTest, HealthAndReadiness) {
  EXPECT_THAT(Get("/healthz"), StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(Get("/readyz"), StartsWith("HTTP/1.1 503 Service Unavailable"));
  ready_ = true;
  EXPECT_THAT(Get("/readyz"), StartsWith("HTTP/1.1 200 OK"));
  ready_ = false;
  EXPECT_THAT(Get("/readyz"), StartsWith("HTTP/1.1 503"));
}

TEST_F(AdminHttpTest, HeadHasNoBody) {
  const std::string response = Get("/metrics", "HEAD");
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(response, HasSubstr("Content-Length: 21\r\n"));
  EXPECT_TRUE(absl::EndsWith(response, "\r\n\r\n")) << response;
}

TEST_F(AdminHttpTest, UnknownPathsAndMethods) {
  EXPECT_THAT(Get("/"), StartsWith("HTTP/1.1 404 Not Found"));
  EXPECT_THAT(Get("/metricsx"), StartsWith("HTTP/1.1 404"));
  const std::string post = Get("/metrics", "POST");
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405 Method Not Allowed"));
  EXPECT_THAT(post, HasSubstr("Allow: GET, HEAD\r\n"));
}

TEST_F(AdminHttpTest, MalformedRequestLinesGet400) {
  for (const std::string& request :
       std::vector<std::string>{"GARBAGE\r\n\r\n", "GET /metrics\r\n\r\n",
                                "GET metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/2.0\r\n\r\n",
                                "get /metrics HTTP/1.1\r\n\r\n", "GET  /metrics HTTP/1.1\r\n\r\n",
                                "\r\n\r\n", std::string("GET /\0 HTTP/1.1\r\n\r\n", 19)}) {
    EXPECT_THAT(RawRequest(address_, request), StartsWith("HTTP/1.1 400 Bad Request")) << request;
  }
}

TEST_F(AdminHttpTest, OversizedRequestGets431AndTheServerCarriesOn) {
  const std::string big = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(4096, 'a') + "\r\n\r\n";
  EXPECT_THAT(RawRequest(address_, big), StartsWith("HTTP/1.1 431"));
  // A request line that never ends is cut off at the limit too.
  EXPECT_THAT(RawRequest(address_, "GET /" + std::string(5000, 'x')), StartsWith("HTTP/1.1 431"));
  EXPECT_THAT(Get("/healthz"), StartsWith("HTTP/1.1 200"));
}

TEST_F(AdminHttpTest, SlowOrSilentClientsAreDisconnected) {
  const int fd = ConnectTcp(address_);
  ASSERT_GE(fd, 0);
  bool timed_out = true;
  // Half a request, then nothing: the server closes the connection after its timeout (0.3 s);
  // the reader gives up only after 10 s.
  const std::string answer =
      SendAndReadAll(fd, "GET /metrics HTTP/1.1\r\n", std::chrono::seconds(10), &timed_out);
  close(fd);
  EXPECT_FALSE(timed_out) << "the server kept a silent connection open";
  EXPECT_EQ(answer, "");
  EXPECT_THAT(Get("/healthz"), StartsWith("HTTP/1.1 200"));
}

TEST_F(AdminHttpTest, ConnectionsBeyondTheLimitAreClosedAndServiceResumes) {
  StartServer(std::chrono::seconds(30));
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(ConnectTcp(address_));
    ASSERT_GE(idle.back(), 0);
  }
  // Connections are accepted in order, so the four are open when the fifth arrives.
  EXPECT_EQ(RawRequest(address_, "GET /healthz HTTP/1.1\r\n\r\n"), "");
  for (int fd : idle) close(fd);
  // Closed connections free their places (the server notices the close asynchronously).
  std::string answer;
  for (int i = 0; i < 100 && !absl::StartsWith(answer, "HTTP/1.1 200"); ++i) {
    answer = Get("/healthz");
    if (answer.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200"));
}

TEST_F(AdminHttpTest, RandomBytesNeverCrashIt) {
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  for (int i = 0; i < 20; ++i) {
    std::string junk(std::uniform_int_distribution<int>(1, 2000)(rng), '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (i % 2 == 0) junk += "\r\n\r\n";
    const std::string answer = RawRequest(address_, junk, std::chrono::milliseconds(2000));
    EXPECT_TRUE(answer.empty() || absl::StartsWith(answer, "HTTP/1.1 4")) << "seed " << seed;
  }
  EXPECT_THAT(Get("/healthz"), StartsWith("HTTP/1.1 200")) << "seed " << seed;
}

TEST_F(AdminHttpTest, StopIsIdempotentAndFreesThePort) {
  server_->Stop();
  server_->Stop();
  EXPECT_EQ(RawRequest(address_, "GET /healthz HTTP/1.1\r\n\r\n"), "");
}

TEST(AdminHttpStartTest, BadAddressesAreErrors) {
  AdminHttpOptions options;
  options.address = "nonsense";
  EXPECT_EQ(AdminHttpServer::Start(options, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.address = "127.0.0.1:0";
  auto first = AdminHttpServer::Start(options, {});
  ASSERT_TRUE(first.ok());
  options.address = (*first)->address();
  EXPECT_EQ(AdminHttpServer::Start(options, {}).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace waav::server
