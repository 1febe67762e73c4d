// A real Prometheus server for integration tests: started on a free loopback port with a
// generated configuration that scrapes one target (job "waavd") every second, its TSDB in a
// temporary directory, stopped with SIGTERM. Queries go to its HTTP API (/api/v1/...) over a
// plain socket and come back as parsed JSON.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "nlohmann/json.hpp"

namespace waav::testing {

class PrometheusProcess {
 public:
  // Starts `binary` scraping http://`target`/metrics every `scrape_interval_s` seconds and waits
  // up to `timeout` for /-/ready. Returns nullptr (and sets *error, with the server's log) when
  // it does not come up.
  static std::unique_ptr<PrometheusProcess> Start(
      const std::string& binary, const std::string& target, int scrape_interval_s,
      std::string* error, std::chrono::seconds timeout = std::chrono::seconds(30));
  ~PrometheusProcess();  // SIGTERM, then SIGKILL after 10 s; removes the TSDB

  PrometheusProcess(const PrometheusProcess&) = delete;
  PrometheusProcess& operator=(const PrometheusProcess&) = delete;

  const std::string& address() const { return address_; }

  // GET `path_and_query` (already URL-encoded): the HTTP status (0 when the request failed)
  // and the body.
  struct HttpResponse {
    int status = 0;
    std::string body;
  };
  HttpResponse Get(const std::string& path_and_query) const;

  // /api/v1/query?query=`expr` evaluated now: the whole answer ({"status": ..., "data": ...}
  // or {"status": "error", "error": ...}); on a transport or JSON failure, an object with
  // status "transport_error" and the reason in "error".
  nlohmann::json Query(const std::string& expr) const;

  // The server's log so far.
  std::string Log() const;

 private:
  PrometheusProcess() = default;
  bool Exited();

  pid_t pid_ = -1;
  bool exited_ = false;
  std::filesystem::path dir_;
  std::string address_;
};

// Percent-encodes everything but RFC 3986's unreserved characters.
std::string UrlEncode(const std::string& text);

}  // namespace waav::testing
