// Run-time choice of backend by name (`--backend auto|cpu|cuda|hip|vulkan`).
//
// Each backend library registers a factory from a static initializer in its own translation
// unit; backend libraries are CMake OBJECT libraries so that initializer is always linked.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"

namespace waav {

struct BackendOptions {
  // CPU worker threads for kernels; 0 means all hardware threads. Default: 0.
  int num_threads = 0;
  // Device ordinal for GPU backends. Default: 0.
  int device_index = 0;
  // L2 a GPU backend keeps for the encoder output that decoder steps read again at every layer
  // and step (the CUDA backend's SharedKvAttention hints): bytes, 0 for none, -1 for the
  // backend's default. Default: -1.
  int64_t gpu_l2_encoder_bytes = -1;
};

using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendOptions&)>;

// Registers `factory` under `name`; `priority` orders the choice of "auto" (highest first,
// the first one that starts wins). Returns true so it can initialise a static.
bool RegisterBackend(std::string name, int priority, BackendFactory factory);

// Creates the named backend, or with "auto" the highest-priority backend that starts.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::string_view name,
                                                       const BackendOptions& options = {});

// Names of the backends compiled into this binary.
std::vector<std::string> RegisteredBackends();

}  // namespace waav
