#include "engine/runtime/op_checks.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"

namespace waav::checks {
namespace {

std::string DescribeDTypes(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType d : dtypes) absl::StrAppend(&s, s.empty() ? "" : " or ", std::string(DTypeName(d)));
  return s;
}

Shape WithLastDim(const Shape& shape, int64_t last) {
  std::vector<int64_t> dims = shape.dims();
  dims.back() = last;
  return Shape(std::move(dims));
}

constexpr std::initializer_list<DType> kAnyDType = {DType::kF32, DType::kF16, DType::kI32,
                                                    DType::kI8};

}  // namespace

absl::Status Invalid(const char* op, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", message));
}

absl::Status CheckTensor(DeviceKind device, const char* op, const char* name, const Tensor& t,
                         std::initializer_list<DType> dtypes, int rank, int min_rank) {
  if (!t.defined()) return Invalid(op, absl::StrCat(name, " is an undefined tensor"));
  if (t.device() != device) {
    return Invalid(op, absl::StrCat(name, " ", t.Describe(), " lives on ",
                                    std::string(DeviceKindName(t.device())), ", not ",
                                    std::string(DeviceKindName(device))));
  }
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok = dtype_ok || t.dtype() == d;
  if (!dtype_ok) {
    return Invalid(op, absl::StrCat(name, " ", t.Describe(), " must be ", DescribeDTypes(dtypes)));
  }
  if (rank >= 0 && t.rank() != rank) {
    return Invalid(op, absl::StrCat(name, " ", t.Describe(), " must have rank ", rank));
  }
  if (rank < 0 && t.rank() < min_rank) {
    return Invalid(op, absl::StrCat(name, " ", t.Describe(), " must have rank >= ", min_rank));
  }
  return absl::OkStatus();
}

absl::Status CheckShape(const char* op, const char* name, const Tensor& t, const Shape& expected,
                        const std::string& why) {
  if (t.shape() == expected) return absl::OkStatus();
  return Invalid(op, absl::StrCat(name, " ", t.Describe(), " must have shape ", expected.ToString(),
                                  " (", why, ")"));
}

bool Overlap(const Tensor& a, const Tensor& b) {
  const char* pa = static_cast<const char*>(a.data());
  const char* pb = static_cast<const char*>(b.data());
  return a.size_bytes() > 0 && b.size_bytes() > 0 && pa < pb + b.size_bytes() &&
         pb < pa + a.size_bytes();
}

absl::Status CheckInPlaceOrDisjoint(const char* op, const char* y_name, const Tensor& y,
                                    const char* x_name, const Tensor& x) {
  if (y.data() == x.data() && y.size_bytes() == x.size_bytes()) return absl::OkStatus();
  if (!Overlap(x, y)) return absl::OkStatus();
  return Invalid(op, absl::StrCat(y_name, " ", y.Describe(), " partially overlaps ", x_name, " ",
                                  x.Describe()));
}

absl::Status CheckDisjoint(const char* op, const char* y_name, const Tensor& y, const char* x_name,
                           const Tensor& x) {
  if (!Overlap(x, y)) return absl::OkStatus();
  return Invalid(op,
                 absl::StrCat(y_name, " ", y.Describe(), " overlaps ", x_name, " ", x.Describe()));
}

absl::Status ValidateCopyFromHost(DeviceKind device, const void* src, size_t bytes,
                                  const Tensor& dst) {
  RETURN_IF_ERROR(CheckTensor(device, "CopyFromHost", "dst", dst, kAnyDType, -1));
  if (bytes != dst.size_bytes()) {
    return Invalid("CopyFromHost", absl::StrCat(bytes, " bytes given for dst ", dst.Describe(),
                                                " of ", dst.size_bytes(), " bytes"));
  }
  if (bytes > 0 && src == nullptr) return Invalid("CopyFromHost", "src is null");
  return absl::OkStatus();
}

absl::Status ValidateHostBufferHolds(const HostBuffer& buffer, size_t bytes, size_t offset,
                                     const char* op) {
  if (bytes > 0 && buffer.data() == nullptr) return Invalid(op, "the host buffer is empty");
  if (offset <= buffer.size_bytes() && bytes <= buffer.size_bytes() - offset) {
    return absl::OkStatus();
  }
  return Invalid(op, absl::StrCat(bytes, " bytes at offset ", offset, " of a host buffer of ",
                                  buffer.size_bytes()));
}

absl::Status ValidateCopyToHost(DeviceKind device, const Tensor& src, const void* dst,
                                size_t bytes) {
  RETURN_IF_ERROR(CheckTensor(device, "CopyToHost", "src", src, kAnyDType, -1));
  if (bytes != src.size_bytes()) {
    return Invalid("CopyToHost", absl::StrCat(bytes, " bytes given for src ", src.Describe(),
                                              " of ", src.size_bytes(), " bytes"));
  }
  if (bytes > 0 && dst == nullptr) return Invalid("CopyToHost", "dst is null");
  return absl::OkStatus();
}

absl::Status ValidateCopy(DeviceKind device, const Tensor& src, const Tensor& dst,
                          bool half_activations) {
  constexpr const char* kOp = "Copy";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "src", src, kAnyDType, -1));
  const bool convert = half_activations && src.dtype() == DType::kF32;
  const std::initializer_list<DType> same = {src.dtype()};
  const std::initializer_list<DType> f32_or_f16 = {DType::kF32, DType::kF16};
  RETURN_IF_ERROR(CheckTensor(device, kOp, "dst", dst, convert ? f32_or_f16 : same, -1));
  if (src.numel() != dst.numel()) {
    return Invalid(kOp, absl::StrCat("src ", src.Describe(), " and dst ", dst.Describe(),
                                     " differ in element count"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LinearDims> ValidateLinear(DeviceKind device, const Tensor& x, const Tensor& weight,
                                          const Tensor* bias, const Tensor& y,
                                          bool half_activations) {
  constexpr const char* kOp = "Linear";
  if (half_activations) {
    RETURN_IF_ERROR(CheckTensor(device, kOp, "x", x, {DType::kF32, DType::kF16}, -1, 1));
    RETURN_IF_ERROR(CheckTensor(device, kOp, "y", y, {DType::kF32, DType::kF16}, -1, 1));
  } else {
    RETURN_IF_ERROR(CheckTensor(device, kOp, "x", x, {DType::kF32}, -1, 1));
    RETURN_IF_ERROR(CheckTensor(device, kOp, "y", y, {DType::kF32}, -1, 1));
  }
  RETURN_IF_ERROR(CheckTensor(device, kOp, "weight", weight, {DType::kF32, DType::kF16}, 2));
  const int64_t n = weight.dim(0), k = weight.dim(1);
  if (x.dim(-1) != k) {
    return Invalid(kOp, absl::StrCat("x ", x.Describe(), " and weight ", weight.Describe(),
                                     " disagree on the input size (", x.dim(-1), " vs ", k, ")"));
  }
  RETURN_IF_ERROR(
      CheckShape(kOp, "y", y, WithLastDim(x.shape(), n), "x's leading dims, weight's rows"));
  if (bias != nullptr) {
    RETURN_IF_ERROR(CheckTensor(device, kOp, "bias", *bias, {DType::kF32}, 1));
    RETURN_IF_ERROR(CheckShape(kOp, "bias", *bias, Shape{n}, "one per output"));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "bias", *bias));
  }
  RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "x", x));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "weight", weight));
  return LinearDims{k == 0 ? y.numel() / std::max<int64_t>(n, 1) : x.numel() / k, n, k};
}

absl::StatusOr<LinearDims> ValidateLinearPlanes(DeviceKind device, const Tensor& x,
                                                const Tensor& weight, const Tensor* bias,
                                                absl::Span<const Tensor> planes,
                                                bool half_activations) {
  constexpr const char* kOp = "LinearPlanes";
  const std::initializer_list<DType> acts = {DType::kF32, DType::kF16};
  const std::initializer_list<DType> f32 = {DType::kF32};
  RETURN_IF_ERROR(CheckTensor(device, kOp, "x", x, half_activations ? acts : f32, -1, 1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "weight", weight, {DType::kF32, DType::kF16}, 2));
  const int64_t p = static_cast<int64_t>(planes.size());
  const int64_t n = weight.dim(0), k = weight.dim(1);
  if (p < 1 || p > Backend::kMaxLinearPlanes || n % p != 0) {
    return Invalid(kOp, absl::StrCat(p, " planes: must be 1 to ", Backend::kMaxLinearPlanes,
                                     " and divide weight's rows in ", weight.Describe()));
  }
  if (x.dim(-1) != k) {
    return Invalid(kOp, absl::StrCat("x ", x.Describe(), " and weight ", weight.Describe(),
                                     " disagree on the input size (", x.dim(-1), " vs ", k, ")"));
  }
  const int64_t m = k == 0 ? 0 : x.numel() / k, c = n / p;
  for (int64_t i = 0; i < p; ++i) {
    const Tensor& y = planes[static_cast<size_t>(i)];
    const std::string name = absl::StrCat("plane ", i);
    RETURN_IF_ERROR(
        CheckTensor(device, kOp, name.c_str(), y, half_activations ? acts : f32, -1, 1));
    if (y.dtype() != planes[0].dtype() || y.dim(-1) != c || y.numel() != m * c) {
      return Invalid(kOp, absl::StrCat(name, " ", y.Describe(), " must hold ", m, " rows of ", c,
                                       " (rows of x, weight rows / planes) of plane 0's dtype"));
    }
    if (bias != nullptr) RETURN_IF_ERROR(CheckDisjoint(kOp, name.c_str(), y, "bias", *bias));
    RETURN_IF_ERROR(CheckDisjoint(kOp, name.c_str(), y, "x", x));
    RETURN_IF_ERROR(CheckDisjoint(kOp, name.c_str(), y, "weight", weight));
    for (int64_t j = 0; j < i; ++j) {
      const std::string other = absl::StrCat("plane ", j);
      RETURN_IF_ERROR(
          CheckDisjoint(kOp, name.c_str(), y, other.c_str(), planes[static_cast<size_t>(j)]));
    }
  }
  if (bias != nullptr) {
    RETURN_IF_ERROR(CheckTensor(device, kOp, "bias", *bias, {DType::kF32}, 1));
    RETURN_IF_ERROR(CheckShape(kOp, "bias", *bias, Shape{n}, "one per output"));
  }
  return LinearDims{m, n, k};
}

absl::StatusOr<LinearPlanesAppendDims> ValidateLinearPlanesAppend(
    DeviceKind device, const Tensor& x, const Tensor& weight, const Tensor* bias,
    absl::Span<const Tensor> planes, int first_appended, const Tensor& positions) {
  constexpr const char* kOp = "LinearPlanesAppend";
  const int64_t p = static_cast<int64_t>(planes.size());
  if (first_appended < 0 || first_appended > p) {
    return Invalid(kOp, absl::StrCat("first_appended ", first_appended, " must be in [0, ", p,
                                     "] for ", p, " planes"));
  }
  // LinearPlanes' checks of x, weight, bias and the planes (width, dtype, rows, overlaps), with
  // each cache standing in as its first M rows ([M, C] of a [M, L, C] cache).
  std::vector<Tensor> dense(planes.begin(), planes.end());
  int64_t capacity = 0;
  for (int64_t i = first_appended; i < p; ++i) {
    const Tensor& cache = planes[static_cast<size_t>(i)];
    const std::string name = absl::StrCat("plane ", i);
    RETURN_IF_ERROR(CheckTensor(device, kOp, name.c_str(), cache, {DType::kF32}, 3));
    if (cache.dim(1) < 1 || (i > first_appended && cache.dim(1) != capacity)) {
      return Invalid(kOp, absl::StrCat(name, " ", cache.Describe(),
                                       " must be a cache [M, L, C] with L >= 1, the L of plane ",
                                       first_appended));
    }
    capacity = cache.dim(1);
    ASSIGN_OR_RETURN(Tensor rows, cache.Reshape({cache.dim(0) * capacity, cache.dim(2)}));
    ASSIGN_OR_RETURN(dense[static_cast<size_t>(i)], rows.Slice(0, cache.dim(0)));
  }
  ASSIGN_OR_RETURN(const LinearDims d, ValidateLinearPlanes(device, x, weight, bias, dense,
                                                            /*half_activations=*/false));
  for (int64_t i = first_appended; i < p; ++i) {
    const Tensor& cache = planes[static_cast<size_t>(i)];
    const std::string name = absl::StrCat("plane ", i);
    // Whole caches, not just the first rows, must not overlap anything else.
    for (int64_t j = 0; j < p; ++j) {
      if (j == i) continue;
      const std::string other = absl::StrCat("plane ", j);
      RETURN_IF_ERROR(
          CheckDisjoint(kOp, name.c_str(), cache, other.c_str(), planes[static_cast<size_t>(j)]));
    }
    RETURN_IF_ERROR(CheckDisjoint(kOp, name.c_str(), cache, "x", x));
    RETURN_IF_ERROR(CheckDisjoint(kOp, name.c_str(), cache, "weight", weight));
    if (bias != nullptr) RETURN_IF_ERROR(CheckDisjoint(kOp, name.c_str(), cache, "bias", *bias));
  }
  RETURN_IF_ERROR(CheckTensor(device, kOp, "positions", positions, {DType::kI32}, 1));
  RETURN_IF_ERROR(CheckShape(kOp, "positions", positions, Shape{d.m}, "one per row of x"));
  for (int64_t i = 0; i < p; ++i) {
    const std::string name = absl::StrCat("plane ", i);
    RETURN_IF_ERROR(
        CheckDisjoint(kOp, name.c_str(), planes[static_cast<size_t>(i)], "positions", positions));
  }
  return LinearPlanesAppendDims{d, first_appended < p ? capacity : 0};
}

absl::StatusOr<Conv1dDims> ValidateConv1d(DeviceKind device, const Tensor& x, const Tensor& weight,
                                          const Tensor& bias, int stride, int padding,
                                          const Tensor& y) {
  constexpr const char* kOp = "Conv1d";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "x", x, {DType::kF32}, 3));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "weight", weight, {DType::kF32, DType::kF16}, 3));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "bias", bias, {DType::kF32}, 1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "y", y, {DType::kF32}, 3));
  if (stride < 1 || padding < 0) {
    return Invalid(kOp,
                   absl::StrCat("stride ", stride, " must be >= 1 and padding ", padding, " >= 0"));
  }
  Conv1dDims s{x.dim(0), x.dim(1), x.dim(2), weight.dim(0), weight.dim(2), 0, stride, padding};
  if (weight.dim(1) != s.in_channels || s.kernel_size < 1) {
    return Invalid(kOp, absl::StrCat("weight ", weight.Describe(), " must be [Cout, ",
                                     s.in_channels, ", K>=1] for x ", x.Describe()));
  }
  RETURN_IF_ERROR(CheckShape(kOp, "bias", bias, Shape{s.out_channels}, "one per output channel"));
  const int64_t span = s.time + 2 * int64_t{padding} - s.kernel_size;
  if (span < 0) {
    return Invalid(kOp, absl::StrCat("x ", x.Describe(), " with padding ", padding,
                                     " is shorter than the kernel of weight ", weight.Describe()));
  }
  s.out_time = span / stride + 1;
  RETURN_IF_ERROR(CheckShape(kOp, "y", y, Shape{s.batch, s.out_time, s.out_channels},
                             "[B, (T + 2·padding − K) / stride + 1, Cout]"));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "x", x));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "weight", weight));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "bias", bias));
  return s;
}

absl::StatusOr<RowDims> ValidateLayerNorm(DeviceKind device, const Tensor& x, const Tensor& gamma,
                                          const Tensor& beta, float eps, const Tensor& y,
                                          bool half_activations) {
  constexpr const char* kOp = "LayerNorm";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "x", x, {DType::kF32}, -1, 1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "gamma", gamma, {DType::kF32}, 1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "beta", beta, {DType::kF32}, 1));
  if (half_activations) {
    RETURN_IF_ERROR(CheckTensor(device, kOp, "y", y, {DType::kF32, DType::kF16}, -1, 1));
  } else {
    RETURN_IF_ERROR(CheckTensor(device, kOp, "y", y, {DType::kF32}, -1, 1));
  }
  const int64_t cols = x.dim(-1);
  RETURN_IF_ERROR(CheckShape(kOp, "gamma", gamma, Shape{cols}, "x's last dim"));
  RETURN_IF_ERROR(CheckShape(kOp, "beta", beta, Shape{cols}, "x's last dim"));
  RETURN_IF_ERROR(CheckShape(kOp, "y", y, x.shape(), "same as x"));
  RETURN_IF_ERROR(CheckInPlaceOrDisjoint(kOp, "y", y, "x", x));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "gamma", gamma));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "beta", beta));
  if (!(eps >= 0.0f) || std::isinf(eps)) {
    return Invalid(kOp, absl::StrCat("eps ", eps, " must be finite and >= 0"));
  }
  return RowDims{cols == 0 ? 0 : x.numel() / cols, cols};
}

absl::Status ValidateAdd(DeviceKind device, const Tensor& a, const Tensor& b, const Tensor& y) {
  constexpr const char* kOp = "Add";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "a", a, {DType::kF32}, -1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "b", b, {DType::kF32}, -1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "y", y, {DType::kF32}, -1));
  // b: a's shape, or a's trailing dims (added to each of a's leading rows).
  bool trailing = b.rank() <= a.rank();
  for (int i = 0; trailing && i < b.rank(); ++i) {
    trailing = b.dim(i) == a.dim(a.rank() - b.rank() + i);
  }
  if (!trailing) {
    return Invalid(kOp, absl::StrCat("b ", b.Describe(), " must have a's shape ",
                                     a.shape().ToString(), " or its trailing dims"));
  }
  RETURN_IF_ERROR(CheckShape(kOp, "y", y, a.shape(), "same as a"));
  RETURN_IF_ERROR(CheckInPlaceOrDisjoint(kOp, "y", y, "a", a));
  return CheckInPlaceOrDisjoint(kOp, "y", y, "b", b);
}

absl::Status ValidateGelu(DeviceKind device, const Tensor& x, const Tensor& y) {
  constexpr const char* kOp = "Gelu";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "x", x, {DType::kF32}, -1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "y", y, {DType::kF32}, -1));
  RETURN_IF_ERROR(CheckShape(kOp, "y", y, x.shape(), "same as x"));
  return CheckInPlaceOrDisjoint(kOp, "y", y, "x", x);
}

absl::StatusOr<RowDims> ValidateLogSoftmax(DeviceKind device, const Tensor& x, const Tensor& y) {
  constexpr const char* kOp = "LogSoftmax";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "x", x, {DType::kF32}, -1, 1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "y", y, {DType::kF32}, -1, 1));
  RETURN_IF_ERROR(CheckShape(kOp, "y", y, x.shape(), "same as x"));
  RETURN_IF_ERROR(CheckInPlaceOrDisjoint(kOp, "y", y, "x", x));
  const int64_t cols = x.dim(-1);
  return RowDims{cols == 0 ? 0 : x.numel() / cols, cols};
}

absl::StatusOr<ArgmaxDims> ValidateArgmaxLogSumExp(DeviceKind device, const Tensor& logits,
                                                   const Tensor& masks, const Tensor& mask_index,
                                                   const Tensor& out) {
  constexpr const char* kOp = "ArgmaxLogSumExp";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "logits", logits, {DType::kF32}, 2));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "masks", masks, {DType::kI32}, 2));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "mask_index", mask_index, {DType::kI32}, 1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "out", out, {DType::kF32}, 2));
  const int64_t rows = logits.dim(0), cols = logits.dim(1);
  if (cols < 1 || cols >= (int64_t{1} << 24)) {
    return Invalid(kOp, absl::StrCat("logits ", logits.Describe(),
                                     " must have between 1 and 2^24 - 1 columns"));
  }
  const int64_t words = (cols + 31) / 32;
  if (masks.dim(1) != words || masks.dim(0) < 1) {
    return Invalid(kOp, absl::StrCat("masks ", masks.Describe(), " must be [M >= 1, ", words,
                                     "]: one bit per column of logits ", logits.Describe()));
  }
  RETURN_IF_ERROR(CheckShape(kOp, "mask_index", mask_index, Shape{rows}, "one per row of logits"));
  RETURN_IF_ERROR(CheckShape(kOp, "out", out, Shape{rows, 5}, "[B, 5]"));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"logits", &logits},
                                {"masks", &masks},
                                {"mask_index", &mask_index}}) {
    RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, name, *t));
  }
  return ArgmaxDims{rows, cols, masks.dim(0), words};
}

absl::StatusOr<int64_t> ValidateFeedChoices(DeviceKind device, const Tensor& choices,
                                            const Tensor& mask_index, int32_t max_position,
                                            const Tensor& tokens, const Tensor& positions,
                                            const Tensor& lengths) {
  constexpr const char* kOp = "FeedChoices";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "choices", choices, {DType::kF32}, 2));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "mask_index", mask_index, {DType::kI32}, 1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "tokens", tokens, {DType::kI32}, -1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "positions", positions, {DType::kI32}, 1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "lengths", lengths, {DType::kI32}, 1));
  const int64_t rows = choices.dim(0);
  RETURN_IF_ERROR(CheckShape(kOp, "choices", choices, Shape{rows, 5}, "[B, 5]"));
  RETURN_IF_ERROR(CheckShape(kOp, "mask_index", mask_index, Shape{rows}, "one per row"));
  RETURN_IF_ERROR(CheckShape(kOp, "positions", positions, Shape{rows}, "one per row"));
  RETURN_IF_ERROR(CheckShape(kOp, "lengths", lengths, Shape{rows}, "one per row"));
  if (tokens.numel() != rows || tokens.rank() < 1 || tokens.rank() > 2 || tokens.dim(0) != rows) {
    return Invalid(kOp, absl::StrCat("tokens ", tokens.Describe(), " must be [", rows, "] or [",
                                     rows, ", 1]: one per row of choices ", choices.Describe()));
  }
  if (max_position < 0 || max_position >= (int32_t{1} << 24)) {
    return Invalid(kOp, absl::StrCat("max_position ", max_position, " is outside [0, 2^24)"));
  }
  const std::pair<const char*, const Tensor*> written[] = {
      {"tokens", &tokens}, {"positions", &positions}, {"lengths", &lengths}};
  for (size_t i = 0; i < 3; ++i) {
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"choices", &choices},
                                  {"mask_index", &mask_index}}) {
      RETURN_IF_ERROR(CheckDisjoint(kOp, written[i].first, *written[i].second, name, *t));
    }
    for (size_t j = i + 1; j < 3; ++j) {
      RETURN_IF_ERROR(CheckDisjoint(kOp, written[i].first, *written[i].second, written[j].first,
                                    *written[j].second));
    }
  }
  return rows;
}

absl::StatusOr<AttentionDims> ValidateAttention(DeviceKind device, const Tensor& q, const Tensor& k,
                                                const Tensor& v, const Tensor* kv_lengths,
                                                int num_heads, float scale, const Tensor& out,
                                                bool half_activations) {
  constexpr const char* kOp = "Attention";
  // f16 activations: q, k, v all f16, or q f32 with k, v f16 (an f16 K/V cache).
  const bool f16 = half_activations && q.defined() && q.dtype() == DType::kF16;
  const DType in = f16 ? DType::kF16 : DType::kF32;
  RETURN_IF_ERROR(CheckTensor(device, kOp, "q", q, {in}, 3));
  const std::initializer_list<DType> f32_or_f16 = {DType::kF32, DType::kF16};
  const std::initializer_list<DType> only_in = {in};
  RETURN_IF_ERROR(
      CheckTensor(device, kOp, "k", k, half_activations && !f16 ? f32_or_f16 : only_in, 3));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "v", v, {k.dtype()}, 3));
  // An f16 out (the f32 result rounded) for the GEMM that reads it, with f16 activations.
  RETURN_IF_ERROR(
      CheckTensor(device, kOp, "out", out,
                  half_activations ? f32_or_f16 : std::initializer_list<DType>{DType::kF32}, 3));
  const int64_t batch = q.dim(0), tq = q.dim(1), width = q.dim(2), tk = k.dim(1);
  if (k.dim(0) != batch || k.dim(2) != width) {
    return Invalid(kOp, absl::StrCat("k ", k.Describe(), " must be [", batch, ", Tk, ", width,
                                     "] for q ", q.Describe()));
  }
  RETURN_IF_ERROR(CheckShape(kOp, "v", v, k.shape(), "same as k"));
  RETURN_IF_ERROR(CheckShape(kOp, "out", out, q.shape(), "same as q"));
  if (num_heads < 1 || width % num_heads != 0) {
    return Invalid(kOp, absl::StrCat("num_heads ", num_heads,
                                     " must be >= 1 and divide q's last dim in ", q.Describe()));
  }
  if (!std::isfinite(scale)) return Invalid(kOp, absl::StrCat("scale ", scale, " is not finite"));
  if (kv_lengths != nullptr) {
    RETURN_IF_ERROR(CheckTensor(device, kOp, "kv_lengths", *kv_lengths, {DType::kI32}, 1));
    RETURN_IF_ERROR(CheckShape(kOp, "kv_lengths", *kv_lengths, Shape{batch}, "one per batch row"));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "kv_lengths", *kv_lengths));
  }
  RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "q", q));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "k", k));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "v", v));
  return AttentionDims{batch, tq, tk, num_heads, width / num_heads};
}

absl::StatusOr<SharedKvAttentionDims> ValidateSharedKvAttention(
    DeviceKind device, const Tensor& q, const Tensor& kv, const Tensor* kv_scales, int num_heads,
    float scale, const Tensor& out, bool half_activations, bool quantized) {
  constexpr const char* kOp = "SharedKvAttention";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "q", q, {DType::kF32}, 3));
  const std::initializer_list<DType> f32_or_f16 = {DType::kF32, DType::kF16};
  const std::initializer_list<DType> f32 = {DType::kF32};
  const std::initializer_list<DType> f32_f16_or_i8 = {DType::kF32, DType::kF16, DType::kI8};
  const std::initializer_list<DType> f32_or_i8 = {DType::kF32, DType::kI8};
  const std::initializer_list<DType> kv_types = quantized
                                                    ? (half_activations ? f32_f16_or_i8 : f32_or_i8)
                                                    : (half_activations ? f32_or_f16 : f32);
  RETURN_IF_ERROR(CheckTensor(device, kOp, "kv", kv, kv_types, 3));
  if ((kv.dtype() == DType::kI8) != (kv_scales != nullptr)) {
    return Invalid(kOp, absl::StrCat("kv ", kv.Describe(),
                                     kv_scales != nullptr ? " is not i8 but has kv_scales"
                                                          : " is i8 without kv_scales"));
  }
  if (kv_scales != nullptr) {
    RETURN_IF_ERROR(CheckTensor(device, kOp, "kv_scales", *kv_scales, {DType::kF32}, 2));
    RETURN_IF_ERROR(CheckShape(kOp, "kv_scales", *kv_scales, Shape{kv.dim(0), kv.dim(2)},
                               "one per kv row and channel"));
    RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "kv_scales", *kv_scales));
  }
  RETURN_IF_ERROR(CheckTensor(device, kOp, "out", out, half_activations ? f32_or_f16 : f32, 3));
  const int64_t batch = q.dim(0), tq = q.dim(1), width = kv.dim(2), tk = kv.dim(1);
  if (num_heads < 1 || q.dim(2) != num_heads * width) {
    return Invalid(kOp, absl::StrCat("q ", q.Describe(), " must be [B, Tq, num_heads · ", width,
                                     "] (num_heads ", num_heads, ") for kv ", kv.Describe()));
  }
  if (kv.dim(0) != batch) {
    return Invalid(kOp, absl::StrCat("kv ", kv.Describe(), " must have q's ", batch, " rows"));
  }
  if (width < 64 || width > Backend::kMaxSharedKvWidth || width % 64 != 0) {
    return Invalid(kOp, absl::StrCat("kv's width ", width, " must be a multiple of 64 from 64 to ",
                                     Backend::kMaxSharedKvWidth));
  }
  if (tk < 1) return Invalid(kOp, absl::StrCat("kv ", kv.Describe(), " has no keys"));
  RETURN_IF_ERROR(CheckShape(kOp, "out", out, q.shape(), "same as q"));
  if (!std::isfinite(scale)) return Invalid(kOp, absl::StrCat("scale ", scale, " is not finite"));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "q", q));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "kv", kv));
  return SharedKvAttentionDims{batch, tq, tk, num_heads, width};
}

absl::StatusOr<QuantizeChannelsDims> ValidateQuantizeChannels(DeviceKind device, const Tensor& x,
                                                              const Tensor& q,
                                                              const Tensor& scales) {
  constexpr const char* kOp = "QuantizeChannels";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "x", x, {DType::kF32}, 3));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "q", q, {DType::kI8}, 3));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "scales", scales, {DType::kF32}, 2));
  RETURN_IF_ERROR(CheckShape(kOp, "q", q, x.shape(), "same as x"));
  const int64_t batch = x.dim(0), rows = x.dim(1), channels = x.dim(2);
  RETURN_IF_ERROR(
      CheckShape(kOp, "scales", scales, Shape{batch, channels}, "one per batch row and channel"));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "q", q, "x", x));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "scales", scales, "x", x));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "scales", scales, "q", q));
  return QuantizeChannelsDims{batch, rows, channels};
}

absl::StatusOr<HeadScoresDims> ValidateHeadScores(DeviceKind device, const Tensor& q,
                                                  const Tensor& k, int head_dim, float scale,
                                                  absl::Span<const HeadScoresItem> items,
                                                  const Tensor& out) {
  constexpr const char* kOp = "HeadScores";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "q", q, {DType::kF32}, 3));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "k", k, {DType::kF32, DType::kF16}, 3));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "out", out, {DType::kF32}, -1));
  const int64_t batch = q.dim(0), tq = q.dim(1), channels = q.dim(2), tk = k.dim(1);
  if (k.dim(0) != batch || k.dim(2) != channels) {
    return Invalid(kOp, absl::StrCat("k ", k.Describe(), " must be [", batch, ", Tk, ", channels,
                                     "] for q ", q.Describe()));
  }
  if (head_dim < 1 || head_dim > channels) {
    return Invalid(kOp, absl::StrCat("head_dim ", head_dim, " outside [1, ", channels, "]"));
  }
  if (!std::isfinite(scale)) return Invalid(kOp, absl::StrCat("scale ", scale, " is not finite"));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "q", q));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "out", out, "k", k));
  const int64_t heads = channels / head_dim, n = out.numel();
  std::vector<std::pair<int64_t, int64_t>> blocks;  // [offset, end) of each item
  blocks.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const HeadScoresItem& it = items[i];
    const std::string what = absl::StrCat("items[", i, "] ");
    if (it.row < 0 || it.row >= batch) {
      return Invalid(kOp, absl::StrCat(what, "row ", it.row, " outside q ", q.Describe()));
    }
    if (it.head < 0 || it.head >= heads) {
      return Invalid(kOp, absl::StrCat(what, "head ", it.head, " outside the ", heads,
                                       " heads of width ", head_dim, " in ", channels));
    }
    if (it.queries < 1 || it.queries > tq) {
      return Invalid(kOp, absl::StrCat(what, it.queries, " queries (1 to ", tq, ")"));
    }
    if (it.keys < 1 || it.keys > tk) {
      return Invalid(kOp, absl::StrCat(what, it.keys, " keys (1 to ", tk, ")"));
    }
    const int64_t size = it.queries * it.keys;  // both checked small above
    if (it.offset < 0 || it.offset > n - size) {
      return Invalid(kOp, absl::StrCat(what, it.queries, " x ", it.keys, " scores from offset ",
                                       it.offset, " do not fit out ", out.Describe()));
    }
    blocks.emplace_back(it.offset, it.offset + size);
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    if (blocks[i].first < blocks[i - 1].second) {
      return Invalid(kOp, absl::StrCat("two items write out's elements [", blocks[i].first, ", ",
                                       std::min(blocks[i].second, blocks[i - 1].second), ")"));
    }
  }
  return HeadScoresDims{batch, tq, tk, channels};
}

absl::StatusOr<WriteRowsDims> ValidateWriteRows(DeviceKind device, const Tensor& src,
                                                const Tensor& positions, const Tensor& dst) {
  constexpr const char* kOp = "WriteRows";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "src", src, kAnyDType, 3));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "positions", positions, {DType::kI32}, 1));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "dst", dst, {src.dtype()}, 3));
  const int64_t batch = src.dim(0), rows = src.dim(1), channels = src.dim(2);
  if (dst.dim(0) != batch || dst.dim(2) != channels) {
    return Invalid(kOp, absl::StrCat("dst ", dst.Describe(), " must be [", batch, ", L, ", channels,
                                     "] for src ", src.Describe()));
  }
  RETURN_IF_ERROR(CheckShape(kOp, "positions", positions, Shape{batch}, "one per batch row"));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "dst", dst, "src", src));
  RETURN_IF_ERROR(CheckDisjoint(kOp, "dst", dst, "positions", positions));
  return WriteRowsDims{batch, rows, channels, dst.dim(1)};
}

absl::StatusOr<GatherRowsDims> ValidateGatherRows(DeviceKind device, const Tensor& src,
                                                  absl::Span<const int64_t> rows,
                                                  const Tensor& dst) {
  constexpr const char* kOp = "GatherRows";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "src", src, kAnyDType, 2));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "dst", dst, {src.dtype()}, 2));
  const int64_t n = static_cast<int64_t>(rows.size()), channels = src.dim(1);
  RETURN_IF_ERROR(CheckShape(kOp, "dst", dst, Shape{n, channels}, "one row per index"));
  for (int64_t i = 0; i < n; ++i) {
    if (rows[static_cast<size_t>(i)] < 0 || rows[static_cast<size_t>(i)] >= src.dim(0)) {
      return Invalid(kOp, absl::StrCat("rows[", i, "] = ", rows[static_cast<size_t>(i)],
                                       " is outside src ", src.Describe()));
    }
  }
  RETURN_IF_ERROR(CheckDisjoint(kOp, "dst", dst, "src", src));
  return GatherRowsDims{n, channels};
}

absl::StatusOr<EmbedDims> ValidateEmbed(DeviceKind device, const Tensor& tokens,
                                        const Tensor& start_positions, const Tensor& token_table,
                                        const Tensor& position_table, const Tensor& y) {
  constexpr const char* kOp = "Embed";
  RETURN_IF_ERROR(CheckTensor(device, kOp, "tokens", tokens, {DType::kI32}, 2));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "start_positions", start_positions, {DType::kI32}, 1));
  RETURN_IF_ERROR(
      CheckTensor(device, kOp, "token_table", token_table, {DType::kF32, DType::kF16}, 2));
  RETURN_IF_ERROR(
      CheckTensor(device, kOp, "position_table", position_table, {DType::kF32, DType::kF16}, 2));
  RETURN_IF_ERROR(CheckTensor(device, kOp, "y", y, {DType::kF32}, 3));
  const int64_t batch = tokens.dim(0), time = tokens.dim(1), channels = token_table.dim(1);
  RETURN_IF_ERROR(
      CheckShape(kOp, "start_positions", start_positions, Shape{batch}, "one per batch row"));
  if (position_table.dim(1) != channels) {
    return Invalid(kOp,
                   absl::StrCat("position_table ", position_table.Describe(), " and token_table ",
                                token_table.Describe(), " differ in width"));
  }
  RETURN_IF_ERROR(CheckShape(kOp, "y", y, Shape{batch, time, channels}, "[B, T, C]"));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"tokens", &tokens},
                                {"start_positions", &start_positions},
                                {"token_table", &token_table},
                                {"position_table", &position_table}}) {
    RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, name, *t));
  }
  return EmbedDims{batch, time, channels, token_table.dim(0), position_table.dim(0)};
}

}  // namespace waav::checks
