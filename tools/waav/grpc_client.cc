#include "tools/waav/grpc_client.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace waav::cli {
namespace {

absl::Status BadAddress(const std::string& address, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("server address \"", address, "\" ", why,
                   "; expected HOST:PORT (e.g. 127.0.0.1:50051, [::1]:50051) or unix:PATH"));
}

}  // namespace

absl::Status ValidateServerAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    if (address.substr(address.find(':') + 1).empty()) return BadAddress(address, "has no path");
    return absl::OkStatus();
  }
  std::string host;
  std::string port;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == std::string::npos) return BadAddress(address, "has no closing ']'");
    host = address.substr(1, close - 1);
    if (close + 1 >= address.size() || address[close + 1] != ':') {
      return BadAddress(address, "has no port");
    }
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return BadAddress(address, "has no port");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return BadAddress(address, "looks like a bare IPv6 address (put it in brackets)");
    }
  }
  if (host.empty()) return BadAddress(address, "has no host");
  for (char c : host) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      return BadAddress(address, "has a space in its host");
    }
  }
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
  int port_number = 0;
  if (!digits || !absl::SimpleAtoi(port, &port_number) || port_number < 1 || port_number > 65535) {
    return BadAddress(address, absl::StrCat("has port \"", port, "\", not a number 1..65535"));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, bool own_connection) {
  grpc::ChannelArguments args;
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(-1);  // the server's limit applies; it answers RESOURCE_EXHAUSTED
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

std::string DescribeStatus(const grpc::Status& status) {
  std::string out = StatusCodeName(status.error_code());
  if (!status.error_message().empty()) absl::StrAppend(&out, ": ", status.error_message());
  return OneLine(std::move(out));
}

}  // namespace waav::cli
