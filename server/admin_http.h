// The admin HTTP endpoint on its own port and thread (standalone Asio), for operators and
// orchestrators:
//   GET /metrics  Prometheus text exposition 0.0.4 (Content-Type: text/plain; version=0.0.4)
//   GET /healthz  200 while the process runs (liveness)
//   GET /readyz   200 when the models are loaded and the server is not draining, else 503
// HEAD is answered like GET without the body; other methods get 405, other paths 404, a request
// line that is not HTTP/1.x 400. Requests are bounded: headers larger than max_request_bytes
// get 431, a client that does not complete its request within request_timeout is disconnected,
// and at most max_connections are open at once. One request per connection (Connection: close),
// which is all Prometheus and kubelet probes need.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace waav::server {

struct AdminHttpOptions {
  // HOST:PORT; port 0 binds a free port (see AdminHttpServer::port()). Default: 127.0.0.1:9464.
  std::string address = "127.0.0.1:9464";
  // Most bytes of request line and headers. Default: 8192.
  size_t max_request_bytes = 8192;
  // Time a client has to send its whole request, and the response to be written. Default: 5 s.
  std::chrono::milliseconds timeout{5000};
  // Connections open at once; more are closed on accept. Default: 64.
  int max_connections = 64;
};

struct AdminHttpHandlers {
  std::function<std::string()> metrics;  // the exposition text; called on the HTTP thread
  std::function<bool()> ready;           // readiness for /readyz
};

class AdminHttpServer {
 public:
  // Binds and starts serving on its own thread. InvalidArgument for a bad address,
  // Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<AdminHttpServer>> Start(const AdminHttpOptions& options,
                                                                AdminHttpHandlers handlers);
  ~AdminHttpServer();  // Stop()

  // Closes the listener and every connection, and joins the thread. Idempotent.
  void Stop();
  int port() const;
  // "HOST:PORT" as bound.
  std::string address() const;

  class Impl;

 private:
  explicit AdminHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace waav::server
