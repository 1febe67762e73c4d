#include "kernels/cuda/copy_tickets.h"

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/backend_util.h"

namespace waav::cuda {

CopyTickets::~CopyTickets() {
  for (cudaEvent_t event : events_) {
    if (event != nullptr) (void)cudaEventDestroy(event);
  }
}

absl::StatusOr<uint64_t> CopyTickets::Record(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t ticket = next_;
  cudaEvent_t& event = events_[ticket % kEvents];
  if (event == nullptr) {
    RETURN_IF_ERROR(GpuStatus("cudaEventCreateWithFlags",
                              cudaEventCreateWithFlags(&event, cudaEventDisableTiming)));
  }
  RETURN_IF_ERROR(GpuStatus("cudaEventRecord", cudaEventRecord(event, stream)));
  ++next_;
  return ticket;
}

absl::Status CopyTickets::Wait(uint64_t ticket) {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ticket == 0 || ticket >= next_) {
      return absl::InvalidArgumentError(
          absl::StrCat("WaitForCopy: ticket ", ticket, " was not issued (next ", next_, ")"));
    }
    event = events_[ticket % kEvents];
  }
  // Outside the lock: another thread may record the event again meanwhile, and the wait then
  // covers that later point, which still comes after this ticket's copy.
  return GpuStatus("WaitForCopy", cudaEventSynchronize(event));
}

}  // namespace waav::cuda
