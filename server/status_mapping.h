// The one place where an absl::Status, from the engine, the audio decoders or the server's own
// checks, becomes the grpc::Status a client sees (design.md: errors are values up to the gRPC
// boundary). absl and gRPC share the canonical code numbering, so codes carry over unchanged;
// what this adds is the request id, so a person can find the stream in the logs.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"
#include "proto/status_code_name.h"  // StatusCodeName, for log lines

namespace waav::server {

// `request_id` (may be empty) is appended to the message: "... [request_id abc]".
grpc::Status ToGrpcStatus(const absl::Status& status, const std::string& request_id);

// The outcome label of waav_streams_finished_total (metric_names.h kStreamOutcomes): "ok",
// "cancelled", "deadline_exceeded" or "error".
absl::string_view OutcomeLabel(grpc::StatusCode code);

}  // namespace waav::server
