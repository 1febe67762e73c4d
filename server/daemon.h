// waavd's life: bind the listeners, load the models, serve, and on SIGTERM or SIGINT drain:
//   1. readiness goes false (grpc.health.v1 NOT_SERVING, /readyz 503) and the engine stops
//      accepting: new streams and Recognize requests get UNAVAILABLE;
//   2. in-flight streams and requests get up to shutdown_grace_s to finish on their own (a
//      second signal skips the wait);
//   3. whatever is left is closed with UNAVAILABLE, the listeners stop, the engine stops;
//   4. exit code 0.
// Start-up failures (a port in use, a model that does not load) return 1 with one log line
// saying what failed.
#pragma once

#include "server/config.h"

namespace waav::server {

// Blocks SIGTERM and SIGINT in the calling thread first, so call it before any other thread
// exists (every thread inherits the mask; the daemon takes the signals with sigwait).
int RunDaemon(const ServerConfig& config);

}  // namespace waav::server
