// The canonical name of a gRPC status code, as proto/README.md and the logs write it. One
// definition for the daemon (log lines, empty error messages) and every client (the CLI's and
// waav-load's error wording), so that both sides of a failed call name it the same way.
#pragma once

#include <string>

#include "grpcpp/support/status.h"

namespace waav {

// "OK", "CANCELLED", ... "UNAUTHENTICATED"; "CODE_<n>" for a value outside the enum (a newer
// peer's code, or a cast gone wrong), so that the number is never lost.
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace waav
