// Server addresses, status code names and one-line error wording shared by the clients.
#include "tools/waav/grpc_client.h"

#include "gtest/gtest.h"

namespace waav::cli {
namespace {

TEST(ServerAddressTest, AcceptsHostPortIpv6AndUnix) {
  for (const char* ok : {"127.0.0.1:50051", "localhost:1", "waav.example.com:65535", "[::1]:50051",
                         "[fe80::1%eth0]:443", "unix:/tmp/waav.sock", "unix-abstract:waav"}) {
    EXPECT_TRUE(ValidateServerAddress(ok).ok()) << ok << ": " << ValidateServerAddress(ok);
  }
}

TEST(ServerAddressTest, RejectsWhatGrpcWouldMisread) {
  const struct {
    const char* address;
    const char* why;
  } cases[] = {
      {"", "has no port"},
      {"localhost", "has no port"},
      {":50051", "has no host"},
      {"localhost:", "not a number"},
      {"localhost:0", "not a number 1..65535"},
      {"localhost:65536", "not a number 1..65535"},
      {"localhost:+80", "not a number"},
      {"localhost:80 ", "not a number"},
      {"localhost:http", "not a number"},
      {"::1:50051", "IPv6"},
      {"[::1]50051", "has no port"},
      {"[::1", "closing"},
      {"my host:80", "space"},
      {"unix:", "has no path"},
  };
  for (const auto& c : cases) {
    const absl::Status s = ValidateServerAddress(c.address);
    ASSERT_FALSE(s.ok()) << c.address;
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.why), std::string::npos) << c.address << ": " << s.message();
    EXPECT_NE(s.message().find("HOST:PORT"), std::string::npos) << s.message();
  }
}

TEST(StatusWordingTest, CodeNameThenMessageOnOneLine) {
  EXPECT_EQ(DescribeStatus(grpc::Status(grpc::StatusCode::NOT_FOUND, "no model \"x\";\nknown: a")),
            "NOT_FOUND: no model \"x\"; known: a");
  EXPECT_EQ(DescribeStatus(grpc::Status(grpc::StatusCode::CANCELLED, "")), "CANCELLED");
  EXPECT_EQ(OneLine("a\r\nb"), "a  b");
}

}  // namespace
}  // namespace waav::cli
