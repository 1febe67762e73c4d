// What every request handler shares: the configuration, readiness, the model, the engine, the
// offline recognizer, the admission limit, the watchdog and the metrics. Owned by the daemon (or a
// test), alive longer than the gRPC server that uses it.
#pragma once

#include <atomic>

#include "engine/metrics/stage_metrics.h"
#include "server/admission.h"
#include "server/config.h"
#include "server/request_config.h"
#include "server/server_metrics.h"
#include "server/stream_engine.h"
#include "server/stream_watchdog.h"

namespace waav::server {

class OfflineRecognizer;

// Readiness: ready once the models are loaded, until draining starts (SIGTERM). Feeds
// grpc.health.v1 and /readyz.
class ServerState {
 public:
  void SetLoaded() { loaded_.store(true, std::memory_order_release); }
  void StartDraining() { draining_.store(true, std::memory_order_release); }
  bool loaded() const { return loaded_.load(std::memory_order_acquire); }
  bool draining() const { return draining_.load(std::memory_order_acquire); }
  bool ready() const { return loaded() && !draining(); }

 private:
  std::atomic<bool> loaded_{false};
  std::atomic<bool> draining_{false};
};

struct ServiceRuntime {
  const ServerConfig* config = nullptr;
  ServerState* state = nullptr;
  const ModelDescription* model = nullptr;
  // Null until the models are loaded; set before ServerState::SetLoaded(), which publishes them.
  StreamEngine* engine = nullptr;
  OfflineRecognizer* offline = nullptr;
  Admission* admission = nullptr;
  StreamWatchdog* watchdog = nullptr;
  ServerMetrics* metrics = nullptr;
  metrics::StageMetrics* stage_metrics = nullptr;  // may be null
};

}  // namespace waav::server
