#pragma once

#include <vector>

#include "absl/strings/str_cat.h"

namespace waav {

template <typename T>
absl::StatusOr<std::vector<T>> Download(Backend& backend, const Tensor& t) {
  if (sizeof(T) != SizeOf(t.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Download: element size ", sizeof(T), " does not match ", t.Describe()));
  }
  std::vector<T> host(static_cast<size_t>(t.numel()));
  absl::Status status = backend.CopyToHost(t, host.data(), t.size_bytes());
  if (!status.ok()) return status;
  return host;
}

}  // namespace waav
