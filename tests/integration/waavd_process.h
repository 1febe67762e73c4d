// A real waavd process for integration tests: started on loopback ports chosen free at run time
// (--listen 127.0.0.1:0, --port-file), waited for until grpc.health.v1 says SERVING, stopped
// with SIGTERM. Its log goes to a file that tests print when they fail.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace waav::testing {

class WaavdProcess {
 public:
  // Starts `binary` with `args` plus --model-dir, --listen/--metrics-listen on port 0 and
  // --port-file, and waits up to `timeout` for SERVING. Returns nullptr (and sets *error) if it
  // does not come up.
  static std::unique_ptr<WaavdProcess> Start(
      const std::string& binary, const std::string& model_dir, const std::vector<std::string>& args,
      std::string* error, std::chrono::seconds timeout = std::chrono::seconds(60));
  ~WaavdProcess();  // SIGTERM (then SIGKILL after 30 s) unless already stopped

  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  pid_t pid() const { return pid_; }

  // Drops this object's channel (a client's idle connection makes gRPC's shutdown wait).
  void CloseChannel() { channel_.reset(); }
  // Sends `signal` to the daemon.
  void Signal(int signal) const;
  // Waits up to `timeout` for the process to exit; its exit code, or nullopt if it did not exit
  // (or died from a signal: then -signal).
  std::optional<int> WaitForExit(std::chrono::seconds timeout);
  // The daemon's log so far.
  std::string Log() const;

  // "SERVING", "NOT_SERVING", ... or the RPC's error, for service "waav.v1.Recognizer".
  std::string HealthStatus() const;

  // A plain HTTP GET on the admin port: the status code (0 when the request failed), the
  // headers and the body.
  struct HttpResponse {
    int status = 0;
    std::string headers;
    std::string body;
  };
  HttpResponse HttpGet(const std::string& path) const;

 private:
  WaavdProcess() = default;

  pid_t pid_ = -1;
  bool exited_ = false;
  std::filesystem::path dir_;
  std::string grpc_address_;
  std::string metrics_address_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace waav::testing
