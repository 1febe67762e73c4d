// Host-side types shared by the backend (C++) and the kernel launchers (.cu): how a launcher is
// told where and how to run, and the codes of errors that kernels report from the device.
// No device code and no Abseil here: launchers return cudaError_t, the backend turns it into
// an absl::Status.
#pragma once

#include <cstdint>

#include "kernels/cuda/gpu.h"

namespace waav::cuda {

// Ops whose kernels validate index values on the device (see ReportDeviceError in common.cuh).
enum class DeviceErrorOp : uint8_t {
  kNone = 0,
  kAttention = 1,
  kWriteRows = 2,
  kEmbed = 3,
  kArgmaxLogSumExp = 4,
  kFeedChoices = 5,
};

// Where and how a launcher issues its kernels.
struct LaunchContext {
  cudaStream_t stream = nullptr;
  // Launch with programmatic stream serialization (Hopper PDL): the next kernel may be
  // scheduled while this one runs and waits in griddepcontrol.wait for its results.
  bool pdl = false;
  // Device address of the host-mapped error word, or null to skip reporting.
  unsigned long long* error_word = nullptr;
  int sm_count = 1;
  // With pdl: only grids of at most this many blocks per SM launch early (common.cuh).
  int pdl_max_blocks_per_sm = 4;
};

// Makes `device` the calling thread's current GPU where it is not already. The CUDA runtime keeps
// the current device per host thread, and a backend created for GPU 1 is called from other
// threads (the streaming scheduler's, gRPC's) whose current device is 0 until one sets it:
// every entry point that issues work calls this first.
inline void UseDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) (void)cudaSetDevice(device);
}

}  // namespace waav::cuda
