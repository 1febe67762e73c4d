// Host helpers of the CUDA backend: the ops it offers, the status of a CUDA call, the epilogue
// of an activation, the device error word (ReportDeviceError in common.cuh) decoded into a
// status, scratch sizes and the op codes of capture signatures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/fused_linear.cuh"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/linear.cuh"

namespace waav::cuda {

// Backend::supports of a CUDA backend made with `options`.
bool Supports(const CudaBackendOptions& options, Op op);
// OK, or an invalid-argument error naming the first option out of its range (checked before a
// device is opened).
absl::Status ValidateOptions(const CudaBackendOptions& options);
// OK, or an internal error naming `what` and CUDA's message.
absl::Status GpuStatus(const char* what, cudaError_t err);
// The kernels' epilogue for a Backend activation; an invalid-argument error for an unknown one.
absl::StatusOr<Epilogue> ToEpilogue(const char* op, Activation act);
// The error a kernel reported in the device error word `code` (non-zero).
absl::Status DecodeDeviceError(unsigned long long code);

// Selects GPU `device_index` for this thread and returns its properties: Unavailable without a
// driver, a GPU or kernels for it in this build; InvalidArgument for an index not present.
absl::StatusOr<cudaDeviceProp> OpenDevice(int device_index);
// A host-mapped word for the kernels' errors, zeroed: its host and device addresses (the host
// frees it with cudaFreeHost).
absl::Status AllocateErrorWord(unsigned long long** host, unsigned long long** device);
// Page-locked host memory (Backend::AllocateHost): the device copies from it without staging.
absl::StatusOr<HostBuffer> AllocatePinnedHost(size_t bytes);
// Backend::CopyFromHostAsync's checks (`src` holds `bytes` from `offset` on, dst takes them),
// then the copy, stream-ordered, returning at once.
absl::Status CopyFromPinnedHost(DeviceKind device, const HostBuffer& src, size_t offset,
                                size_t bytes, const Tensor& dst, cudaStream_t stream);
// CudaExtensions::FusedLinear's checks, and its kernel's parameters: x as [m, k] in x2, y as
// [m, n] in y2 (kStore, kAccumulate) or q as [m, n / 3] in q2 (kQkv).
absl::Status PrepareFusedLinear(DeviceKind device, const CudaExtensions::FusedLinearArgs& a,
                                FusedLinearParams& p, Tensor& x2, Tensor& y2, Tensor& q2);
// Backend::CopyToHostAsync's checks (`src` fits in `dst` from `offset` on): where its bytes go.
absl::StatusOr<char*> CheckCopyToPinnedHost(DeviceKind device, const Tensor& src,
                                            const HostBuffer& dst, size_t offset);
// What the kernels reported in the host-mapped error word since it was last read (the word is
// cleared): OK or the decoded error. Read after the work in question has finished.
absl::Status TakeDeviceError(unsigned long long* error_host);
// The backend's one-line description (Backend::Describe).
std::string DescribeDevice(const cudaDeviceProp& props, const std::string& gemm, bool fast_math,
                           bool graphs, bool pdl);

// Scratch sizes: whole 256-byte blocks, so that every piece of a scratch buffer stays aligned.
inline size_t RoundUp256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Op codes for capture signatures.
enum class SigOp : int64_t {
  kLinear = 1,
  kConv1d,
  kLayerNorm,
  kAdd,
  kGelu,
  kAttention,
  kWriteRows,
  kEmbed,
  kLogSoftmax,
  kCopy,
  kFusedLinear,
  kRaw,
  kArgmaxLogSumExp,
  kLaunchHint,
  kSharedKvAttention,
  kGatherRows,
  kHeadScores,
  kFeedChoices,
  kQuantizeChannels
};

}  // namespace waav::cuda
