#include "kernels/cuda/backend_util.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/op_checks.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/device_caps.cuh"
#include "kernels/cuda/fused_linear.cuh"
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
    case Op::kFeedChoices:
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
    case Op::kQuantizeChannels:  // for SharedKvAttention's i8 kv
      return Supports(options, Op::kSharedKvAttention);
    default:  // optional ops this backend does not implement
      return false;
  }
}

absl::Status ValidateOptions(const CudaBackendOptions& options) {
  if (options.skinny_max_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("skinny_max_rows ", options.skinny_max_rows, " must be >= 0"));
  }
  if (options.shared_kv_l2_retain_bytes < -1) {
    return absl::InvalidArgumentError(absl::StrCat("shared_kv_l2_retain_bytes ",
                                                   options.shared_kv_l2_retain_bytes,
                                                   " must be -1 (no L2 hints) or >= 0"));
  }
  const int stages = options.shared_kv_i8_stages;
  if (stages != 0 && stages != 2 && stages != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared_kv_i8_stages ", stages, " must be 0 (the plan's choice), 2 or 3"));
  }
  return absl::OkStatus();
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
    case DeviceErrorOp::kFeedChoices: {
      float token = 0;
      std::memcpy(&token, &value, sizeof(token));  // the float's bits
      return checks::Invalid("FeedChoices", absl::StrCat("choices[", index, "][0] = ", token,
                                                         " is not a token id in [0, 2^24)", when));
    }
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

absl::Status PrepareFusedLinear(DeviceKind device, const CudaExtensions::FusedLinearArgs& a,
                                FusedLinearParams& p, Tensor& x2, Tensor& y2, Tensor& q2) {
  constexpr const char* kOp = "FusedLinear";
  RETURN_IF_ERROR(checks::CheckTensor(device, kOp, "x", a.x, {DType::kF32}, -1, 1));
  RETURN_IF_ERROR(
      checks::CheckTensor(device, kOp, "weight", a.weight, {DType::kF32, DType::kF16}, 2));
  const int64_t n = a.weight.dim(0), k = a.weight.dim(1);
  if (a.x.dim(-1) != k || k == 0) {
    return checks::Invalid(kOp, absl::StrCat("x ", a.x.Describe(), " and weight ",
                                             a.weight.Describe(), " disagree on the input size"));
  }
  const int64_t m = a.x.numel() / k;
  ASSIGN_OR_RETURN(x2, a.x.Reshape({m, k}));
  const bool norm = a.norm_gamma.defined();
  if (norm) {
    RETURN_IF_ERROR(checks::CheckTensor(device, kOp, "norm_gamma", a.norm_gamma, {DType::kF32}, 1));
    RETURN_IF_ERROR(checks::CheckShape(kOp, "norm_gamma", a.norm_gamma, Shape{k}, "x's last dim"));
    RETURN_IF_ERROR(checks::CheckShape(kOp, "norm_beta", a.norm_beta, Shape{k}, "x's last dim"));
  }
  if (a.bias.defined()) {
    RETURN_IF_ERROR(checks::CheckShape(kOp, "bias", a.bias, Shape{n}, "one per output"));
  }
  ASSIGN_OR_RETURN(const Epilogue epilogue, ToEpilogue(kOp, a.act));
  p = FusedLinearParams{};
  p.x = x2.data_as<float>();
  p.m = m;
  p.k = k;
  p.gamma = norm ? a.norm_gamma.data_as<float>() : nullptr;
  p.beta = norm ? a.norm_beta.data_as<float>() : nullptr;
  p.eps = a.eps;
  p.w = a.weight.data();
  p.w_f16 = a.weight.dtype() == DType::kF16;
  p.n = n;
  p.bias = a.bias.defined() ? a.bias.data_as<float>() : nullptr;
  p.act = epilogue;
  if (a.output == CudaExtensions::Output::kQkv) {
    if (n % 3 != 0) return checks::Invalid(kOp, "kQkv needs a weight of 3·C rows");
    const int64_t c = n / 3;
    ASSIGN_OR_RETURN(q2, a.q.Reshape({m, c}));
    for (const auto& [name, cache] :
         {std::pair<const char*, const Tensor*>{"k_cache", &a.k_cache}, {"v_cache", &a.v_cache}}) {
      RETURN_IF_ERROR(checks::CheckTensor(device, kOp, name, *cache, {DType::kF32}, 3));
      if (cache->dim(0) != m || cache->dim(2) != c) {
        return checks::Invalid(
            kOp, absl::StrCat(name, " ", cache->Describe(), " must be [", m, ", L, ", c, "]"));
      }
    }
    RETURN_IF_ERROR(checks::CheckShape(kOp, "positions", a.positions, Shape{m}, "one per row"));
    p.output = FusedOutput::kQkv;
    p.q = q2.data_as<float>();
    p.k_cache = a.k_cache.data_as<float>();
    p.v_cache = a.v_cache.data_as<float>();
    p.positions = a.positions.data_as<int32_t>();
    p.capacity = a.k_cache.dim(1);
  } else {
    ASSIGN_OR_RETURN(y2, a.y.Reshape({m, n}));
    RETURN_IF_ERROR(checks::CheckDisjoint(kOp, "y", y2, "x", x2));
    p.output =
        a.output == CudaExtensions::Output::kStore ? FusedOutput::kStore : FusedOutput::kAccumulate;
    p.y = y2.data_as<float>();
  }
  return absl::OkStatus();
}

absl::StatusOr<char*> CheckCopyToPinnedHost(DeviceKind device, const Tensor& src,
                                            const HostBuffer& dst, size_t offset) {
  const size_t bytes = src.size_bytes();
  RETURN_IF_ERROR(checks::ValidateHostBufferHolds(dst, bytes, offset, "CopyToHostAsync"));
  char* to = dst.data_as<char>() + offset;
  RETURN_IF_ERROR(checks::ValidateCopyToHost(device, src, to, bytes));
  return to;
}

absl::Status TakeDeviceError(unsigned long long* error_host) {
  auto* word = reinterpret_cast<volatile unsigned long long*>(error_host);
  const unsigned long long code = *word;
  if (code == 0) return absl::OkStatus();
  *word = 0;
  return DecodeDeviceError(code);
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
  return absl::StrFormat(
      "%s: %s (compute %d.%d, %d SMs, %.1f GiB, %s code); GEMM: %s; math %s; %s; PDL %s",
      WAAV_GPU_NAME, props.name, props.major, props.minor, props.multiProcessorCount,
      static_cast<double>(props.totalGlobalMem) / (1 << 30), GpuCodeName(), gemm,
      fast_math ? "fast (f16/TF32 tensor cores)" : "accurate (f32)",
      graphs ? "CUDA graphs" : "eager graphs", pdl ? "on" : "off");
}

}  // namespace waav::cuda
