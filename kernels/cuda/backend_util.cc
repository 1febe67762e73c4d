#include "kernels/cuda/backend_util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/op_checks.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/shared_kv_attention.cuh"

namespace waav::cuda {

// Which ops the backend offers under `options` (Backend::supports).
bool Supports(const CudaBackendOptions& options, Op op) {
  switch (op) {
    case Op::kLinear:
    case Op::kConv1d:
    case Op::kLayerNorm:
    case Op::kAdd:
    case Op::kGelu:
    case Op::kAttention:
    case Op::kWriteRows:
    case Op::kEmbed:
    case Op::kLogSoftmax:
    case Op::kGraphCapture:
    case Op::kArgmaxLogSumExp:
    case Op::kHeadScores:
    case Op::kDecoderStep:  // for the dims the persistent kernel takes (persistent_step.h)
      return true;
    case Op::kLinearResidual:
      return options.linear_residual;
    case Op::kLinearPlanes:
      return options.linear_planes;
    case Op::kLinearPlanesAppend:
      return options.linear_planes && options.linear_planes_append;
    case Op::kHalfActivations:  // the ops take f16 in any mode; kAccurate keeps f32 between them
      return options.half_activations && options.math == CudaMath::kFast;
    case Op::kSharedKvAttention:  // its kernel reads kv as f16 (an f16 cache: kHalfActivations)
      return cuda::SharedKvAttentionAvailable() && Supports(options, Op::kHalfActivations);
    default:  // optional ops this backend does not implement
      return false;
  }
}

absl::Status GpuStatus(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

absl::StatusOr<Epilogue> ToEpilogue(const char* op, Activation act) {
  switch (act) {
    case Activation::kNone:
      return Epilogue::kNone;
    case Activation::kGelu:
      return Epilogue::kGelu;
    case Activation::kRelu:
      return Epilogue::kRelu;
    case Activation::kSigmoid:
      return Epilogue::kSigmoid;
  }
  return checks::Invalid(op, absl::StrCat("unknown activation ", static_cast<int>(act)));
}

// Decodes the device error word (see ReportDeviceError in common.cuh).
absl::Status DecodeDeviceError(unsigned long long code) {
  const auto op = static_cast<DeviceErrorOp>(code >> 56);
  int64_t index = static_cast<int64_t>((code >> 32) & 0xffffff);
  if (index >= 0x800000) index -= 0x1000000;  // 24-bit two's complement
  const auto value = static_cast<int32_t>(code & 0xffffffffu);
  const char* when = " (found on the device when the kernel ran; that row was not written)";
  switch (op) {
    case DeviceErrorOp::kAttention:
      return checks::Invalid("Attention", absl::StrCat("kv_lengths[", index, "] = ", value,
                                                       " is outside [0, Tk] of k", when));
    case DeviceErrorOp::kWriteRows:
      return checks::Invalid("WriteRows",
                             absl::StrCat("positions[", index, "] = ", value,
                                          " with the rows of src does not fit dst", when));
    case DeviceErrorOp::kEmbed:
      if (index < 0) {
        return checks::Invalid("Embed", absl::StrCat("start_positions[", -1 - index, "] = ", value,
                                                     " with the tokens of its row is outside "
                                                     "position_table",
                                                     when));
      }
      return checks::Invalid("Embed", absl::StrCat("tokens (flat index ", index, ") = ", value,
                                                   " is outside token_table", when));
    case DeviceErrorOp::kArgmaxLogSumExp:
      return checks::Invalid("ArgmaxLogSumExp", absl::StrCat("mask_index[", index, "] = ", value,
                                                             " is outside [-1, M) of masks", when));
    case DeviceErrorOp::kNone:
      break;
  }
  return absl::InternalError(absl::StrFormat("unknown device error word %#x", code));
}

absl::StatusOr<cudaDeviceProp> OpenDevice(int device_index) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("no usable GPU driver or device (", cudaGetErrorString(err), ")"));
  }
  if (count == 0) return absl::UnavailableError("no GPU found");
  if (device_index < 0 || device_index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device_index ", device_index, " is outside the ", count, " GPUs present"));
  }
  RETURN_IF_ERROR(GpuStatus("cudaSetDevice", cudaSetDevice(device_index)));
  cudaDeviceProp props;
  RETURN_IF_ERROR(
      GpuStatus("cudaGetDeviceProperties", cudaGetDeviceProperties(&props, device_index)));
  if (cudaError_t err = ProbeKernelImage(); err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(absl::StrFormat(
        "this build has no kernels for %s (compute capability %d.%d): %s; rebuild with "
        "CMAKE_CUDA_ARCHITECTURES including %d%d",
        props.name, props.major, props.minor, cudaGetErrorString(err), props.major, props.minor));
  }
  return props;
}

absl::StatusOr<HostBuffer> AllocatePinnedHost(size_t bytes) {
  if (bytes == 0) return HostBuffer();
  void* data = nullptr;
  RETURN_IF_ERROR(GpuStatus("cudaHostAlloc", cudaHostAlloc(&data, bytes, cudaHostAllocDefault)));
  return HostBuffer(data, bytes, [](void* p) { (void)cudaFreeHost(p); });
}

absl::Status CopyFromPinnedHost(DeviceKind device, const HostBuffer& src, size_t offset,
                                size_t bytes, const Tensor& dst, cudaStream_t stream) {
  RETURN_IF_ERROR(checks::ValidateHostBufferHolds(src, bytes, offset));
  const char* from = src.data_as<const char>() + offset;
  RETURN_IF_ERROR(checks::ValidateCopyFromHost(device, from, bytes, dst));
  if (bytes == 0) return absl::OkStatus();
  return GpuStatus("CopyFromHostAsync",
                   cudaMemcpyAsync(dst.data(), from, bytes, cudaMemcpyHostToDevice, stream));
}

absl::Status AllocateErrorWord(unsigned long long** host, unsigned long long** device) {
  void* host_word = nullptr;
  RETURN_IF_ERROR(GpuStatus(
      "cudaHostAlloc", cudaHostAlloc(&host_word, sizeof(unsigned long long), cudaHostAllocMapped)));
  *host = static_cast<unsigned long long*>(host_word);
  **host = 0;
  void* device_word = nullptr;
  RETURN_IF_ERROR(
      GpuStatus("cudaHostGetDevicePointer", cudaHostGetDevicePointer(&device_word, host_word, 0)));
  *device = static_cast<unsigned long long*>(device_word);
  return absl::OkStatus();
}

std::string DescribeDevice(const cudaDeviceProp& props, const std::string& gemm, bool fast_math,
                           bool graphs, bool pdl) {
  return absl::StrFormat("%s: %s (compute %d.%d, %d SMs, %.1f GiB); GEMM: %s; math %s; %s; PDL %s",
                         WAAV_GPU_NAME, props.name, props.major, props.minor,
                         props.multiProcessorCount,
                         static_cast<double>(props.totalGlobalMem) / (1 << 30), gemm,
                         fast_math ? "fast (f16/TF32 tensor cores)" : "accurate (f32)",
                         graphs ? "CUDA graphs" : "eager graphs", pdl ? "on" : "off");
}

}  // namespace waav::cuda
