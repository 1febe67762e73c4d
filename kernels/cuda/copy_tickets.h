// Backend::CopyToHostAsync's copies and tickets. Each copy runs on a stream of its own, after an
// event recorded on the backend's stream (so it sees the work submitted before it), and an event
// recorded after it is the ticket's: a caller waits for that copy (WaitForCopy) while the work
// it submitted after the copy goes on running, and that work does not wait for the copy
// either (the copy engine's turn is off the backend's stream: ~9 us a step of the pipelined
// greedy loop on an H100 when it was on it, docs/benchmarks.md session 24). A few events are
// reused in turn: waiting on a ticket whose event has been recorded again since waits for that
// later copy, which comes after this one on the copy stream.
#pragma once

#include <array>
#include <cstddef>
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

  // Copies `bytes` from device `src` to host `dst` after everything submitted to `stream` so far,
  // on the copy stream, and returns the copy's ticket, 1 and up. The calling thread's current
  // device must be the stream's.
  absl::StatusOr<uint64_t> Copy(cudaStream_t stream, void* dst, const void* src, size_t bytes);
  // Waits for the copy of `ticket` (or a later copy recorded on its event); InvalidArgument for
  // 0 or a ticket not yet issued.
  absl::Status Wait(uint64_t ticket);

 private:
  static constexpr size_t kEvents = 8;
  std::mutex mutex_;
  cudaStream_t copy_stream_ = nullptr;
  std::array<cudaEvent_t, kEvents> ready_{};  // on the backend's stream, before each copy
  std::array<cudaEvent_t, kEvents> done_{};   // on the copy stream, after each copy
  uint64_t next_ = 1;
};

}  // namespace waav::cuda
