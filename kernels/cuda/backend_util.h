// Host helpers of the CUDA backend: the status of a CUDA call, the epilogue of an activation,
// and the device error word (ReportDeviceError in common.cuh) decoded into a status.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/linear.cuh"

namespace waav::cuda {

// OK, or an internal error naming `what` and CUDA's message.
absl::Status GpuStatus(const char* what, cudaError_t err);
// The kernels' epilogue for a Backend activation; an invalid-argument error for an unknown one.
absl::StatusOr<Epilogue> ToEpilogue(const char* op, Activation act);
// The error a kernel reported in the device error word `code` (non-zero).
absl::Status DecodeDeviceError(unsigned long long code);

}  // namespace waav::cuda
