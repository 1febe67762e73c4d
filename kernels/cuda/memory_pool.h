// Device memory for the CUDA backend: a caching pool of cudaMalloc'ed blocks in size classes.
//
// Stream order makes reuse safe without events: every kernel, copy and graph replay of a backend
// runs on its one stream, so a block released while kernels that use it are still queued can be
// handed out at once; whatever uses it next is queued behind them. (A second stream would need an
// event per block.) Only a miss reaches cudaMalloc; a failed cudaMalloc frees the cached blocks
// and tries once more.
//
// Ownership: every DeviceBuffer holds a shared_ptr to the pool, so tensors and captured graphs
// may outlive the backend; the pool frees its cached blocks when the last of them is gone.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "engine/runtime/tensor.h"

namespace waav::cuda {

// The device kind this build's buffers report: the same sources build the HIP backend.
#if defined(WAAV_HIP)
inline constexpr DeviceKind kGpuKind = DeviceKind::kHip;
#else
inline constexpr DeviceKind kGpuKind = DeviceKind::kCuda;
#endif

// Every block starts on this boundary (cudaMalloc gives 256; size classes keep it).
inline constexpr size_t kDeviceAlignment = 256;

class DevicePool {
 public:
  explicit DevicePool(int device) : device_(device) {}
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // Multiples of 256 bytes up to 64 KiB, then 8 classes per power of two (at most 12.5% waste).
  static size_t SizeClass(size_t bytes);

  // A block of SizeClass(bytes) bytes, or nullptr when the device is out of memory.
  void* Acquire(size_t bytes);
  // Returns a block obtained from Acquire(bytes) with the same `bytes`.
  void Release(void* block, size_t bytes);

  size_t cached_bytes() const;
  size_t system_allocations() const;
  // Bytes in blocks handed out and not yet released (size-class sizes); any thread.
  size_t in_use_bytes() const { return in_use_bytes_.load(std::memory_order_relaxed); }

 private:
  void FreeCachedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t system_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> in_use_bytes_{0};
};

class DeviceBuffer final : public Buffer {
 public:
  DeviceBuffer(std::shared_ptr<DevicePool> pool, void* data, size_t size_bytes)
      : pool_(std::move(pool)), data_(data), size_bytes_(size_bytes) {}
  ~DeviceBuffer() override { pool_->Release(data_, size_bytes_); }
  void* data() override { return data_; }
  size_t size_bytes() const override { return size_bytes_; }
  DeviceKind device() const override { return kGpuKind; }

 private:
  std::shared_ptr<DevicePool> pool_;
  void* data_;
  size_t size_bytes_;
};

// A tensor of `shape` in a new pooled block; InvalidArgument for negative or overflowing shapes,
// ResourceExhausted when the device is out of memory.
absl::StatusOr<Tensor> AllocateDeviceTensor(const std::shared_ptr<DevicePool>& pool,
                                            const Shape& shape, DType dtype);

}  // namespace waav::cuda
