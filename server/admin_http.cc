#include "server/admin_http.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "asio.hpp"
#include "server/config.h"
#include "spdlog/spdlog.h"

namespace waav::server {
namespace {

using asio::ip::tcp;

constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr char kTextContentType[] = "text/plain; charset=utf-8";

struct Response {
  int status = 200;
  std::string content_type = kTextContentType;
  std::string body;
  std::string extra_headers;
};

Response Plain(int status, std::string body, std::string extra_headers = "") {
  Response r;
  r.status = status;
  r.body = std::move(body);
  r.extra_headers = std::move(extra_headers);
  return r;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

std::string Serialize(const Response& r, bool head) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status), "\r\n",
                                 "Content-Type: ", r.content_type, "\r\n",
                                 "Content-Length: ", r.body.size(), "\r\n", r.extra_headers,
                                 "Cache-Control: no-store\r\n", "Connection: close\r\n\r\n");
  if (!head) out += r.body;
  return out;
}

// Printable ASCII without spaces, as a request target must be.
bool IsTarget(absl::string_view s) {
  if (s.empty() || s[0] != '/') return false;
  for (char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isupper(c)) return false;
  }
  return true;
}

}  // namespace

class AdminHttpServer::Impl {
 public:
  Impl(const AdminHttpOptions& options, AdminHttpHandlers handlers)
      : options_(options), handlers_(std::move(handlers)), acceptor_(io_) {}

  absl::Status Bind() {
    HostPort hp;
    if (absl::Status s = ParseHostPort(options_.address, &hp); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("metrics_listen: ", s.message()));
    }
    asio::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(hp.host, std::to_string(hp.port), ec);
    if (ec || endpoints.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics_listen: cannot resolve '", hp.host, "': ", ec.message()));
    }
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen for admin HTTP on ", options_.address, ": ", ec.message()));
    }
    bound_ = acceptor_.local_endpoint();
    return absl::OkStatus();
  }

  void Run() {
    Accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  void Stop() {
    if (stopped_.exchange(true)) return;
    io_.stop();
    if (thread_.joinable()) thread_.join();
    // The I/O thread is gone: nothing else touches the acceptor now.
    asio::error_code ignored;
    acceptor_.close(ignored);
  }

  int port() const { return bound_.port(); }
  std::string address() const {
    const std::string host = bound_.address().to_string();
    return bound_.address().is_v6() ? absl::StrCat("[", host, "]:", bound_.port())
                                    : absl::StrCat(host, ":", bound_.port());
  }

 private:
  // One request on one connection: read the head (bounded), answer, close.
  class Connection : public std::enable_shared_from_this<Connection> {
   public:
    Connection(Impl* server, tcp::socket socket)
        : server_(server),
          socket_(std::move(socket)),
          timer_(socket_.get_executor()),
          buffer_(server->options_.max_request_bytes) {}
    ~Connection() { --server_->connections_; }

    void Start() {
      auto self = shared_from_this();
      timer_.expires_after(server_->options_.timeout);
      timer_.async_wait([self](const asio::error_code& ec) {
        if (ec) return;  // cancelled: the connection finished in time
        asio::error_code ignored;
        self->socket_.close(ignored);
      });
      asio::async_read_until(
          socket_, buffer_, "\r\n\r\n",
          [self](const asio::error_code& ec, size_t bytes) { self->OnRead(ec, bytes); });
    }

   private:
    void OnRead(const asio::error_code& ec, size_t bytes) {
      if (ec == asio::error::not_found) {
        Write(Serialize(Plain(431, "request head too large\n"), false));
        return;
      }
      if (ec) {           // closed by the client or by the timeout
        timer_.cancel();  // releases the timer's hold on this connection
        return;
      }
      const std::string head(asio::buffers_begin(buffer_.data()),
                             asio::buffers_begin(buffer_.data()) + static_cast<ptrdiff_t>(bytes));
      Write(server_->Handle(head));
    }

    void Write(std::string text) {
      auto self = shared_from_this();
      out_ = std::move(text);
      asio::async_write(socket_, asio::buffer(out_), [self](const asio::error_code&, size_t) {
        asio::error_code ignored;
        self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
        self->socket_.close(ignored);
        self->timer_.cancel();
      });
    }

    Impl* server_;
    tcp::socket socket_;
    asio::steady_timer timer_;
    asio::streambuf buffer_;
    std::string out_;
  };

  void Accept() {
    acceptor_.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
      if (!acceptor_.is_open()) return;
      if (!ec) {
        if (connections_ >= options_.max_connections) {
          asio::error_code ignored;
          socket.close(ignored);
        } else {
          ++connections_;
          std::make_shared<Connection>(this, std::move(socket))->Start();
        }
      }
      Accept();
    });
  }

  // `head`: the request line and headers, through the blank line.
  std::string Handle(const std::string& head) {
    const std::string line = head.substr(0, head.find("\r\n"));
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 3 || !IsToken(parts[0]) || !IsTarget(parts[1]) ||
        (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0")) {
      return Serialize(Plain(400, "malformed request line\n"), false);
    }
    const bool head_only = parts[0] == "HEAD";
    if (parts[0] != "GET" && !head_only) {
      return Serialize(Plain(405, "only GET and HEAD are supported\n", "Allow: GET, HEAD\r\n"),
                       false);
    }
    const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
    Response r;
    if (path == "/metrics") {
      r.content_type = kMetricsContentType;
      r.body = handlers_.metrics ? handlers_.metrics() : std::string();
    } else if (path == "/healthz") {
      r.body = "ok\n";
    } else if (path == "/readyz") {
      const bool ready = handlers_.ready && handlers_.ready();
      r.status = ready ? 200 : 503;
      r.body = ready ? "ready\n" : "not ready\n";
    } else {
      r.status = 404;
      r.body = "not found; try /metrics, /healthz or /readyz\n";
    }
    return Serialize(r, head_only);
  }

  const AdminHttpOptions options_;
  const AdminHttpHandlers handlers_;
  // Outlives io_: destroying io_ destroys pending connections, which decrement it.
  std::atomic<int> connections_{0};
  asio::io_context io_;  // declared before the sockets that use it, so destroyed after them
  tcp::acceptor acceptor_;
  tcp::endpoint bound_;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

absl::StatusOr<std::unique_ptr<AdminHttpServer>> AdminHttpServer::Start(
    const AdminHttpOptions& options, AdminHttpHandlers handlers) {
  auto impl = std::make_unique<Impl>(options, std::move(handlers));
  if (absl::Status s = impl->Bind(); !s.ok()) return s;
  impl->Run();
  return std::unique_ptr<AdminHttpServer>(new AdminHttpServer(std::move(impl)));
}

AdminHttpServer::AdminHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AdminHttpServer::~AdminHttpServer() { Stop(); }
void AdminHttpServer::Stop() { impl_->Stop(); }
int AdminHttpServer::port() const { return impl_->port(); }
std::string AdminHttpServer::address() const { return impl_->address(); }

}  // namespace waav::server
