#include "proto/status_code_name.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace waav {
namespace {

TEST(StatusCodeNameTest, EveryCanonicalCodeHasItsOwnName) {
  // The numbering is gRPC's (and absl's): 0 OK .. 16 UNAUTHENTICATED.
  const char* const kWant[] = {"OK",
                               "CANCELLED",
                               "UNKNOWN",
                               "INVALID_ARGUMENT",
                               "DEADLINE_EXCEEDED",
                               "NOT_FOUND",
                               "ALREADY_EXISTS",
                               "PERMISSION_DENIED",
                               "RESOURCE_EXHAUSTED",
                               "FAILED_PRECONDITION",
                               "ABORTED",
                               "OUT_OF_RANGE",
                               "UNIMPLEMENTED",
                               "INTERNAL",
                               "UNAVAILABLE",
                               "DATA_LOSS",
                               "UNAUTHENTICATED"};
  std::set<std::string> seen;
  for (int code = 0; code <= 16; ++code) {
    const std::string name = StatusCodeName(static_cast<grpc::StatusCode>(code));
    EXPECT_EQ(name, kWant[code]) << "code " << code;
    EXPECT_TRUE(seen.insert(name).second) << name << " twice";
  }
}

TEST(StatusCodeNameTest, OutsideTheEnumKeepsTheNumber) {
  EXPECT_EQ(StatusCodeName(static_cast<grpc::StatusCode>(17)), "CODE_17");
  EXPECT_EQ(StatusCodeName(static_cast<grpc::StatusCode>(99)), "CODE_99");
  EXPECT_EQ(StatusCodeName(static_cast<grpc::StatusCode>(-1)), "CODE_-1");
}

}  // namespace
}  // namespace waav
