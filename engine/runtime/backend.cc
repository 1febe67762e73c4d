#include "engine/runtime/backend.h"

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"

namespace waav {

namespace {

absl::Status NotImplemented(std::string_view backend, const char* op) {
  return absl::UnimplementedError(
      absl::StrCat("backend '", std::string(backend), "' does not implement ", op));
}

}  // namespace

absl::Status Backend::Activate(const Tensor&, Activation, const Tensor&) {
  return NotImplemented(name(), "Activate");
}

absl::Status Backend::ComplexMagnitude(const Tensor&, const Tensor&) {
  return NotImplemented(name(), "ComplexMagnitude");
}

absl::Status Backend::LstmCell(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&, const Tensor&, const Tensor&) {
  return NotImplemented(name(), "LstmCell");
}

absl::Status Backend::ArgmaxLogSumExp(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return NotImplemented(name(), "ArgmaxLogSumExp");
}

absl::Status Backend::LinearResidual(const Tensor&, const Tensor&, const Tensor*, Activation,
                                     const Tensor&, const Tensor&) {
  return NotImplemented(name(), "LinearResidual");
}

absl::Status Backend::LinearPlanes(const Tensor&, const Tensor&, const Tensor*, int,
                                   const Tensor&) {
  return NotImplemented(name(), "LinearPlanes");
}

absl::Status Backend::BeginCapture() {
  return absl::UnimplementedError(
      absl::StrCat("backend '", std::string(name()), "' cannot capture graphs"));
}

absl::StatusOr<std::unique_ptr<Graph>> Backend::EndCapture() {
  return absl::UnimplementedError(
      absl::StrCat("backend '", std::string(name()), "' cannot capture graphs"));
}

BackendStats Backend::stats() const { return {}; }

absl::StatusOr<Tensor> Upload(Backend& backend, const Shape& shape, DType dtype, const void* src) {
  ASSIGN_OR_RETURN(Tensor t, backend.Allocate(shape, dtype));
  RETURN_IF_ERROR(backend.CopyFromHost(src, t.size_bytes(), t));
  return t;
}

}  // namespace waav
