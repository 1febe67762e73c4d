// What every client of waavd shares: the server address, the channel, and how a failed call is
// told to a person (one line: the status code's name, then gRPC's message).
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "proto/status_code_name.h"  // StatusCodeName

namespace waav::cli {

// Where `waavd --listen` listens by default.
inline constexpr char kDefaultServer[] = "127.0.0.1:50051";

// Checks a --server value: HOST:PORT (a name or IPv4 address, or [IPv6]:PORT) with a port in
// 1..65535, or a gRPC "unix:PATH" / "unix-abstract:NAME" address. InvalidArgument says what is
// wrong and shows the expected form.
absl::Status ValidateServerAddress(const std::string& address);

// An insecure channel to `address` (waavd serves plaintext gRPC; TLS belongs to the proxy in
// front of it). Messages up to 64 MiB are accepted from the server. `own_connection`: the
// channel gets a TCP connection of its own instead of sharing one with other channels to the
// same address (gRPC's global subchannel pool), as separate clients would.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, bool own_connection = false);

// "UNAVAILABLE: failed to connect to all addresses ..." on one line (newlines become spaces).
std::string DescribeStatus(const grpc::Status& status);

// `text` with newlines and carriage returns replaced by spaces, so an error is one line.
std::string OneLine(std::string text);

}  // namespace waav::cli
