// The tickets of Backend::CopyToHostAsync: an event recorded on the backend's stream after each
// copy, so that a caller waits for that copy (WaitForCopy) while the work it submitted after the
// copy goes on running. A few events are reused in turn: waiting on a ticket whose event has
// been recorded again since waits for that later point of the stream, which covers the copy.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/gpu.h"

namespace waav::cuda {

class CopyTickets {
 public:
  CopyTickets() = default;
  CopyTickets(const CopyTickets&) = delete;
  CopyTickets& operator=(const CopyTickets&) = delete;
  ~CopyTickets();

  // Records the next ticket's event on `stream` (after everything submitted to it so far) and
  // returns the ticket, 1 and up. The calling thread's current device must be the stream's.
  absl::StatusOr<uint64_t> Record(cudaStream_t stream);
  // Waits for the event of `ticket` (or a later recording of its event); InvalidArgument for 0
  // or a ticket not yet issued.
  absl::Status Wait(uint64_t ticket);

 private:
  static constexpr size_t kEvents = 8;
  std::mutex mutex_;
  std::array<cudaEvent_t, kEvents> events_{};
  uint64_t next_ = 1;
};

}  // namespace waav::cuda
