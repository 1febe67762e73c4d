#include "tools/waav/health_command.h"

#include <chrono>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace waav::cli {

CLI::App* AddHealthCommand(CLI::App& app, HealthArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "health", "Ask waavd's health service whether it serves (exit 0: SERVING, 1: not)");
  cmd->add_option("--server", args->server, "waavd address, HOST:PORT")->capture_default_str();
  cmd->add_option("--service", args->service,
                  "Service to ask about: \"\" (the server) or waav.v1.Recognizer");
  cmd->add_option("--timeout", args->timeout_s, "Deadline of the check, s")->capture_default_str();
  return cmd;
}

int RunHealth(const HealthArgs& args, const CommandOutput& io) {
  absl::Status valid = ValidateServerAddress(args.server);
  if (valid.ok() && !(args.timeout_s > 0 && args.timeout_s <= 3600)) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("--timeout ", args.timeout_s, " is outside (0, 3600] s"));
  }
  if (!valid.ok()) {
    io.err << "waav: health: " << OneLine(std::string(valid.message())) << std::endl;
    return 2;
  }
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(args.server));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000)));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(args.service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    // The health service answers NOT_FOUND for a service name it does not know.
    io.err << "waav: health " << args.server << ": " << DescribeStatus(status) << std::endl;
    return 1;
  }
  io.out << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status())
         << std::endl;
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace waav::cli
