// `waav health`: asks a server's grpc.health.v1.Health service whether it is serving.
#pragma once

#include <string>

#include "tools/waav/grpc_client.h"
#include "tools/waav/stream_command.h"

namespace waav::cli {

struct HealthArgs {
  std::string server = kDefaultServer;  // --server HOST:PORT
  // The service to ask about: "" (the whole server, default) or "waav.v1.Recognizer".
  std::string service;
  double timeout_s = 5;  // deadline of the check
};

CLI::App* AddHealthCommand(CLI::App& app, HealthArgs* args);

// Prints the status ("SERVING", "NOT_SERVING", ...) on `out`. Exit code: 0 when SERVING; 1
// otherwise, including a failed call (one line on `err` with the status code's name, e.g.
// UNAVAILABLE when nothing listens); 2 for bad arguments.
int RunHealth(const HealthArgs& args, const CommandOutput& io);

}  // namespace waav::cli
