#include "engine/runtime/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace waav {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::ToString() const { return absl::StrCat("[", absl::StrJoin(dims_, ", "), "]"); }

Tensor::Tensor(std::shared_ptr<Buffer> buffer, size_t offset_bytes, Shape shape, DType dtype)
    : buffer_(std::move(buffer)), offset_bytes_(offset_bytes), shape_(std::move(shape)),
      dtype_(dtype) {}

absl::StatusOr<Tensor> Tensor::Slice(int64_t begin, int64_t end) const {
  if (rank() == 0 || begin < 0 || end < begin || end > dim(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice [", begin, ", ", end, ") out of range for ", Describe()));
  }
  std::vector<int64_t> dims = shape_.dims();
  const int64_t row_elements = dims[0] == 0 ? 0 : numel() / dims[0];
  dims[0] = end - begin;
  return Tensor(buffer_, offset_bytes_ + static_cast<size_t>(begin * row_elements) * SizeOf(dtype_),
                Shape(std::move(dims)), dtype_);
}

absl::StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  if (shape.numel() != numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reshape ", Describe(), " to ", shape.ToString()));
  }
  return Tensor(buffer_, offset_bytes_, std::move(shape), dtype_);
}

std::string Tensor::Describe() const { return absl::StrCat(std::string(DTypeName(dtype_)), shape_.ToString()); }

}  // namespace waav
