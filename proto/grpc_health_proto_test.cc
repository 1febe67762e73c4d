// The grpc.health.v1 client code generated from the system's health.proto compiles, links and
// round-trips, so `waav health` and the integration tests can ask a server's health service.
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

TEST(GrpcHealthProtoTest, MessagesRoundTripAndTruncationsFail) {
  HealthCheckRequest request;
  request.set_service("waav.v1.Recognizer");
  const std::string bytes = request.SerializeAsString();
  HealthCheckRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.service(), "waav.v1.Recognizer");
  for (size_t length = 1; length < bytes.size(); ++length) {
    EXPECT_FALSE(parsed.ParseFromString(bytes.substr(0, length))) << length;
  }

  HealthCheckResponse response;
  response.set_status(HealthCheckResponse::NOT_SERVING);
  HealthCheckResponse parsed_response;
  ASSERT_TRUE(parsed_response.ParseFromString(response.SerializeAsString()));
  EXPECT_EQ(parsed_response.status(), HealthCheckResponse::NOT_SERVING);
}

TEST(GrpcHealthProtoTest, ServiceHasCheckAndWatch) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "grpc.health.v1.Health");
  ASSERT_NE(service, nullptr);
  ASSERT_NE(service->FindMethodByName("Check"), nullptr);
  ASSERT_NE(service->FindMethodByName("Watch"), nullptr);
  EXPECT_TRUE(service->FindMethodByName("Watch")->server_streaming());
  auto channel = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  EXPECT_NE(Health::NewStub(channel), nullptr);
}

}  // namespace
