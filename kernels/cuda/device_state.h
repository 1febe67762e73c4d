// The CUDA backend's device state: what its calls' closures need (stream, memory pool, error
// word, cuBLAS, the GEMM configuration, the launch context), shared with the graphs that hold
// them so that a graph stays runnable (and its memory valid) after the backend is gone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/runtime/tensor.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_caps.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/memory_pool.h"

namespace waav::cuda {

// Arrival counters for SplitAttention's merge: enough for 1,048,576 (row, head, query block)
// groups, zeroed once and left zero by every kernel. (The HalfGemm split counters follow them.)
constexpr int64_t kAttentionCounters = int64_t{1} << 20;

struct DeviceState {
  ~DeviceState();

  int device = 0;
  std::shared_ptr<DevicePool> pool;
  std::shared_ptr<GraphRuntime> graphs;        // owns the stream
  unsigned long long* error_host = nullptr;    // host-mapped error word
  unsigned long long* error_device = nullptr;  // the same word as the device sees it
  Tensor counters;
  Tensor blas_workspace;
  std::unique_ptr<Blas> blas;
  GemmConfig gemm;
  LaunchContext ctx;
  // Its multiprocessors and shared memory (device_caps.cuh), for the kernels' plans.
  GpuShape gpu_shape;
  // L2 set aside for SharedKvAttention's retained rows (CudaBackendOptions::
  // shared_kv_l2_retain_bytes > 0), shared with the device's other backends (device_state.cc).
  size_t l2_set_aside = 0;
  bool l2_lease = false;
};

// The state of a backend with `options` on the device `props` describes (already opened): its
// stream, the zeroed counters, cuBLAS where options.use_cublas and it loads (`gemm_description`:
// what runs the GEMMs, LoadBlas), the kernels' shared-memory limits, PDL where the device has it.
absl::StatusOr<std::shared_ptr<DeviceState>> CreateDeviceState(const CudaBackendOptions& options,
                                                               const cudaDeviceProp& props,
                                                               std::string* gemm_description);

}  // namespace waav::cuda
