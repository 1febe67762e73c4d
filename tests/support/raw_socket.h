// Plain TCP for tests that speak a protocol byte by byte (the admin HTTP endpoint): connect to
// a loopback address, send, read until the peer closes.
#pragma once

#include <chrono>
#include <string>

namespace waav::testing {

// A connected TCP socket to "HOST:PORT" (IPv4 dotted host), or -1. Closed by the caller.
int ConnectTcp(const std::string& address);

// Sends `data` (all of it, or as much as the peer takes), then reads until the peer closes the
// connection or `timeout` passes. `timed_out` (optional) tells which.
std::string SendAndReadAll(int fd, const std::string& data, std::chrono::milliseconds timeout,
                           bool* timed_out = nullptr);

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed), or 0. For
// programs that cannot bind port 0 and report it; the caller retries if someone else took it.
int FreeLoopbackPort();

// Connects, sends `request`, reads the whole answer, closes. "" when it cannot connect.
std::string RawRequest(const std::string& address, const std::string& request,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

}  // namespace waav::testing
