// One thread that gives every open stream a periodic tick, for what a stream must do without a
// message to react to: its idle timeout, its wall-clock duration limit, and retrying audio that
// the engine's full ingest ring refused (the stream stops reading meanwhile, so gRPC flow
// control slows the client down). A tick never blocks: each client does a few checks under its
// own lock and returns.
//
// Lock order: the watchdog's mutex, then a client's. Unregister() takes the watchdog's mutex,
// so once it returns no tick of that client is running or will run, and the client may be
// deleted.
#pragma once

#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace waav::server {

class StreamWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  class Client {
   public:
    virtual ~Client() = default;
    virtual void OnTick(Clock::time_point now) = 0;
    // Ends the client's work with `status` (the drain's grace period is over).
    virtual void Abort(const absl::Status& status) = 0;
  };

  // `period`: time between ticks. `on_round` (optional) runs once per round after the clients,
  // for periodic work such as updating a queue-depth gauge.
  explicit StreamWatchdog(std::chrono::milliseconds period, std::function<void()> on_round = {});
  ~StreamWatchdog();  // stops the thread

  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  void Register(Client* client) ABSL_LOCKS_EXCLUDED(mu_);
  void Unregister(Client* client) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `fn` for every registered client, under the watchdog's lock (the drain uses this to
  // close the streams left when the grace period ends).
  void ForEach(const std::function<void(Client*)>& fn) ABSL_LOCKS_EXCLUDED(mu_);
  int size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  const std::chrono::milliseconds period_;
  const std::function<void()> on_round_;
  mutable absl::Mutex mu_;
  std::set<Client*> clients_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace waav::server
