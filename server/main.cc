// waavd: waav's streaming speech recognition daemon. See docs/server.md.
#include <iostream>

#include "CLI/CLI.hpp"
#include "kernels/cpu/openblas_setup.h"
#include "server/config_sources.h"
#include "server/daemon.h"
#include "server/version.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

int Run(int argc, char** argv) {
  CLI::App app{
      "waavd: streaming speech recognition over gRPC (waav.v1.Recognizer), with grpc.health.v1, "
      "server reflection, and /metrics, /healthz, /readyz on the admin port.\n"
      "Settings come from defaults < --config FILE (YAML) < WAAV_* environment < flags.\n"
      "SIGTERM/SIGINT: stop accepting, let in-flight streams finish within shutdown-grace-s, "
      "exit 0."};
  app.set_version_flag("--version",
                       std::string(waav::server::kVersion) + " (" + waav::server::kRevision + ")");
  waav::server::CommandLine command_line(&app);
  CLI11_PARSE(app, argc, argv);

  auto config = command_line.Resolve(waav::server::EnvironmentFromProcess());
  if (!config.ok()) {
    std::cerr << "waavd: " << config.status().message() << std::endl;
    return 2;
  }
  if (command_line.print_config()) {
    std::cout << waav::server::ConfigToYaml(*config);
    return 0;
  }
  // Logs go to stderr; one line per stream start and end.
  spdlog::set_default_logger(spdlog::stderr_color_mt("waavd"));
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  return waav::server::RunDaemon(*config);
}

}  // namespace

int main(int argc, char** argv) {
  waav::cpu::EnsureOpenBlasCoreType(argv);
  // waav reports errors as values; an exception here is a library's (allocation, CLI11) and
  // ends the process with one line instead of std::terminate's.
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "waavd: " << e.what() << std::endl;
    return 1;
  }
}
