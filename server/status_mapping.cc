#include "server/status_mapping.h"

#include "absl/strings/str_cat.h"

namespace waav::server {

grpc::Status ToGrpcStatus(const absl::Status& status, const std::string& request_id) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  // absl has no code above 16 (UNAUTHENTICATED) either; anything else is our bug.
  const grpc::StatusCode grpc_code =
      code >= 1 && code <= 16 ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::INTERNAL;
  std::string message(status.message());
  if (message.empty()) message = StatusCodeName(grpc_code);
  if (!request_id.empty()) absl::StrAppend(&message, " [request_id ", request_id, "]");
  return grpc::Status(grpc_code, message);
}

absl::string_view OutcomeLabel(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "ok";
    case grpc::StatusCode::CANCELLED:
      return "cancelled";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "deadline_exceeded";
    default:
      return "error";
  }
}

}  // namespace waav::server
