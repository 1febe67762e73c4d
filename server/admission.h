// The admission limit on concurrent streams, checked before a stream reads its first message,
// so a stream beyond the limit is refused at once (RESOURCE_EXHAUSTED) instead of slowing every
// stream down. A stream's slot is held until the engine's session is over (see EngineSink in
// stream_reactor.cc), so the engine never holds more sessions than the server admitted.
#pragma once

#include <atomic>
#include <memory>

#include "engine/metrics/registry.h"

namespace waav::server {

class Admission {
 public:
  // `active` (waav_streams_active) follows the count; may be null.
  Admission(int max_streams, metrics::Gauge* active) : max_(max_streams), active_gauge_(active) {}

  class Slot {
   public:
    ~Slot() { admission_->Release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    friend class Admission;
    explicit Slot(Admission* admission) : admission_(admission) {}
    Admission* admission_;
  };

  // A slot, or nullptr when max_streams are taken. The Admission must outlive its slots.
  std::unique_ptr<Slot> TryAcquire() {
    int n = active_.load(std::memory_order_relaxed);
    do {
      if (n >= max_) return nullptr;
    } while (!active_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel));
    if (active_gauge_ != nullptr) active_gauge_->Inc();
    return std::unique_ptr<Slot>(new Slot(this));
  }

  int active() const { return active_.load(std::memory_order_acquire); }
  int max_streams() const { return max_; }

 private:
  void Release() {
    active_.fetch_sub(1, std::memory_order_acq_rel);
    if (active_gauge_ != nullptr) active_gauge_->Dec();
  }

  const int max_;
  metrics::Gauge* const active_gauge_;
  std::atomic<int> active_{0};
};

}  // namespace waav::server
