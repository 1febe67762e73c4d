#include "kernels/cuda/copy_tickets.h"

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/backend_util.h"

namespace waav::cuda {

CopyTickets::~CopyTickets() {
  // Teardown: a copy still in flight finishes before the driver frees what it uses.
  for (const auto* events : {&ready_, &done_}) {
    for (cudaEvent_t event : *events) {
      if (event != nullptr) (void)cudaEventDestroy(event);
    }
  }
  if (copy_stream_ != nullptr) (void)cudaStreamDestroy(copy_stream_);
}

absl::StatusOr<uint64_t> CopyTickets::Copy(cudaStream_t stream, void* dst, const void* src,
                                           size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (copy_stream_ == nullptr) {
    RETURN_IF_ERROR(GpuStatus("cudaStreamCreateWithFlags",
                              cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking)));
  }
  const uint64_t ticket = next_;
  const size_t slot = ticket % kEvents;
  for (cudaEvent_t* event : {&ready_[slot], &done_[slot]}) {
    if (*event == nullptr) {
      RETURN_IF_ERROR(GpuStatus("cudaEventCreateWithFlags",
                                cudaEventCreateWithFlags(event, cudaEventDisableTiming)));
    }
  }
  RETURN_IF_ERROR(GpuStatus("cudaEventRecord", cudaEventRecord(ready_[slot], stream)));
  RETURN_IF_ERROR(
      GpuStatus("cudaStreamWaitEvent", cudaStreamWaitEvent(copy_stream_, ready_[slot], 0)));
  if (bytes > 0) {
    RETURN_IF_ERROR(GpuStatus(
        "CopyToHostAsync", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, copy_stream_)));
  }
  RETURN_IF_ERROR(GpuStatus("cudaEventRecord", cudaEventRecord(done_[slot], copy_stream_)));
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
    event = done_[ticket % kEvents];
  }
  // Outside the lock: another thread may record the event again meanwhile, and the wait then
  // covers that later copy, which still comes after this ticket's on the copy stream.
  return GpuStatus("WaitForCopy", cudaEventSynchronize(event));
}

}  // namespace waav::cuda
