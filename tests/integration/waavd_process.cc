#include "tests/integration/waavd_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
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

}  // namespace

std::unique_ptr<WaavdProcess> WaavdProcess::Start(const std::string& binary,
                                                  const std::string& model_dir,
                                                  const std::vector<std::string>& args,
                                                  std::string* error,
                                                  std::chrono::seconds timeout) {
  std::unique_ptr<WaavdProcess> p(new WaavdProcess());
  p->dir_ = MakeTempDir("waavd-test");
  const std::string port_file = (p->dir_ / "ports").string();
  const std::string log_file = (p->dir_ / "waavd.log").string();
  std::vector<std::string> argv = {binary,        "--model-dir", model_dir,
                                   "--listen",    "127.0.0.1:0", "--metrics-listen",
                                   "127.0.0.1:0", "--port-file", port_file};
  argv.insert(argv.end(), args.begin(), args.end());

  // Made before fork: between fork and exec a child of a threaded process may only make
  // async-signal-safe calls (no malloc).
  std::vector<char*> cargs;
  for (std::string& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    *error = "fork failed";
    return nullptr;
  }
  if (pid == 0) {
    // Dies with the test (a ctest timeout kills it with SIGKILL, which runs no destructor).
    // The signal comes when the forking thread ends: tests start daemons on their main thread.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    execv(binary.c_str(), cargs.data());
    _exit(127);
  }
  p->pid_ = pid;

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      p->exited_ = true;
      *error = "waavd exited during start-up:\n" + p->Log();
      return nullptr;
    }
    if (p->grpc_address_.empty() && std::filesystem::exists(port_file)) {
      std::istringstream lines(ReadFile(port_file));
      std::string name, address;
      while (lines >> name >> address) {
        if (name == "grpc") p->grpc_address_ = address;
        if (name == "metrics") p->metrics_address_ = address;
      }
      if (!p->grpc_address_.empty()) {
        p->channel_ = grpc::CreateChannel(p->grpc_address_, grpc::InsecureChannelCredentials());
      }
    }
    if (p->channel_ != nullptr && p->HealthStatus() == "SERVING") return p;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *error = "waavd did not become SERVING in time:\n" + p->Log();
  return nullptr;
}

WaavdProcess::~WaavdProcess() {
  channel_.reset();  // an idle client connection would hold up the daemon's exit
  if (pid_ > 0 && !exited_) {
    Signal(SIGTERM);
    if (!WaitForExit(std::chrono::seconds(30))) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

void WaavdProcess::Signal(int signal) const { kill(pid_, signal); }

std::optional<int> WaavdProcess::WaitForExit(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

std::string WaavdProcess::Log() const { return ReadFile(dir_ / "waavd.log"); }

std::string WaavdProcess::HealthStatus() const {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("waav.v1.Recognizer");
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return "error " + std::to_string(status.error_code());
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

WaavdProcess::HttpResponse WaavdProcess::HttpGet(const std::string& path) const {
  HttpResponse response;
  const std::string raw = RawRequest(
      metrics_address_, "GET " + path + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
  const size_t end = raw.find("\r\n\r\n");
  if (raw.compare(0, 9, "HTTP/1.1 ") != 0 || end == std::string::npos) return response;
  response.status = std::stoi(raw.substr(9, 3));
  response.headers = raw.substr(0, end);
  response.body = raw.substr(end + 4);
  return response;
}

}  // namespace waav::testing
