#include "kernels/cuda/backend_util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/runtime/op_checks.h"

namespace waav::cuda {

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

}  // namespace waav::cuda
