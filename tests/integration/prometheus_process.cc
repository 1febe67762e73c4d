#include "tests/integration/prometheus_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/support/raw_socket.h"
#include "tests/support/test_env.h"

namespace waav::testing {
namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

pid_t Spawn(std::vector<std::string> argv, const std::string& log_file) {
  // Everything the child needs is made before fork: between fork and exec a child of a
  // threaded process may only make async-signal-safe calls (no malloc).
  std::vector<char*> cargs;
  for (std::string& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // Dies with the test (a ctest timeout kills it with SIGKILL, which runs no destructor).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  const int fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
  }
  execv(cargs[0], cargs.data());
  _exit(127);
}

}  // namespace

std::string UrlEncode(const std::string& text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::unique_ptr<PrometheusProcess> PrometheusProcess::Start(const std::string& binary,
                                                            const std::string& target,
                                                            int scrape_interval_s,
                                                            std::string* error,
                                                            std::chrono::seconds timeout) {
  std::unique_ptr<PrometheusProcess> p(new PrometheusProcess());
  p->dir_ = MakeTempDir("prometheus-test");
  const std::filesystem::path config = p->dir_ / "prometheus.yml";
  {
    std::ofstream out(config);
    out << "global:\n"
        << "  scrape_interval: " << scrape_interval_s << "s\n"
        << "  scrape_timeout: " << scrape_interval_s << "s\n"
        << "  evaluation_interval: " << scrape_interval_s << "s\n"
        << "scrape_configs:\n"
        << "  - job_name: waavd\n"
        << "    static_configs:\n"
        << "      - targets: ['" << target << "']\n";
  }
  const std::string log_file = (p->dir_ / "prometheus.log").string();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // The port is chosen free and then handed over, so another process may take it in between:
  // a server that exits at start-up is started again on another port.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = FreeLoopbackPort();
    if (port == 0) {
      *error = "no free loopback port";
      return nullptr;
    }
    p->address_ = "127.0.0.1:" + std::to_string(port);
    p->exited_ = false;
    p->pid_ = Spawn({binary, "--config.file=" + config.string(),
                     "--storage.tsdb.path=" + (p->dir_ / "data").string(),
                     "--web.listen-address=" + p->address_, "--log.level=warn"},
                    log_file);
    if (p->pid_ < 0) {
      *error = "fork failed";
      return nullptr;
    }
    while (std::chrono::steady_clock::now() < deadline && !p->Exited()) {
      if (p->Get("/-/ready").status == 200) return p;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!p->Exited()) break;  // still starting after the timeout
  }
  *error = "prometheus did not become ready:\n" + p->Log();
  return nullptr;
}

bool PrometheusProcess::Exited() {
  if (exited_) return true;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) exited_ = true;
  return exited_;
}

PrometheusProcess::~PrometheusProcess() {
  if (pid_ > 0 && !Exited()) {
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!Exited() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!Exited()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

PrometheusProcess::HttpResponse PrometheusProcess::Get(const std::string& path_and_query) const {
  // HTTP/1.0: the answer is not chunked and ends when the server closes the connection.
  const std::string raw =
      RawRequest(address_, "GET " + path_and_query + " HTTP/1.0\r\nHost: prometheus\r\n\r\n",
                 std::chrono::milliseconds(10000));
  HttpResponse response;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || end == std::string::npos) return response;
  const size_t space = raw.find(' ');
  if (space == std::string::npos || space + 4 > raw.size()) return response;
  response.status = std::atoi(raw.substr(space + 1, 3).c_str());
  response.body = raw.substr(end + 4);
  return response;
}

nlohmann::json PrometheusProcess::Query(const std::string& expr) const {
  const HttpResponse response = Get("/api/v1/query?query=" + UrlEncode(expr));
  if (response.status == 0) {
    return {{"status", "transport_error"}, {"error", "no HTTP answer from " + address_}};
  }
  nlohmann::json answer = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (answer.is_discarded() || !answer.is_object()) {
    return {{"status", "transport_error"},
            {"error", "HTTP " + std::to_string(response.status) + ", not JSON: " + response.body}};
  }
  return answer;
}

std::string PrometheusProcess::Log() const { return ReadFile(dir_ / "prometheus.log"); }

}  // namespace waav::testing
