#include "server/stream_watchdog.h"

#include "absl/time/time.h"

namespace waav::server {

StreamWatchdog::StreamWatchdog(std::chrono::milliseconds period, std::function<void()> on_round)
    : period_(period), on_round_(std::move(on_round)) {
  thread_ = std::thread([this] { Loop(); });
}

StreamWatchdog::~StreamWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void StreamWatchdog::Register(Client* client) {
  absl::MutexLock lock(&mu_);
  clients_.insert(client);
}

void StreamWatchdog::Unregister(Client* client) {
  absl::MutexLock lock(&mu_);
  clients_.erase(client);
}

void StreamWatchdog::ForEach(const std::function<void(Client*)>& fn) {
  absl::MutexLock lock(&mu_);
  for (Client* client : clients_) fn(client);
}

int StreamWatchdog::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(clients_.size());
}

void StreamWatchdog::Loop() {
  const absl::Duration period = absl::FromChrono(period_);
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    // Sleeps for the period unless stopped; the lock is released while waiting.
    mu_.AwaitWithTimeout(absl::Condition(&stop_), period);
    if (stop_) break;
    const Clock::time_point now = Clock::now();
    for (Client* client : clients_) client->OnTick(now);
    if (on_round_) on_round_();
  }
}

}  // namespace waav::server
