// Host memory for the CPU backend: 64-byte-aligned buffers from a size-bucketed free-list pool.
//
// Ownership: every CpuBuffer holds a shared_ptr to the pool state, so buffers (and the tensors
// and captured graphs that hold them) may outlive the backend; the pool frees its cached
// blocks when the last of them is gone.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "engine/runtime/tensor.h"

namespace waav::cpu {

inline constexpr size_t kCpuAlignment = 64;  // one cache line; also the widest vector (AVX-512)

// Freed blocks are kept per size class and handed out again; sizes are rounded up to a class
// (multiples of 64 bytes up to 4 KiB, then 8 classes per power of two, so at most 12.5% waste).
class CpuMemoryPool {
 public:
  CpuMemoryPool() = default;
  ~CpuMemoryPool();
  CpuMemoryPool(const CpuMemoryPool&) = delete;
  CpuMemoryPool& operator=(const CpuMemoryPool&) = delete;

  static size_t SizeClass(size_t bytes);

  // A block of SizeClass(bytes) bytes, or nullptr when the system is out of memory.
  void* Acquire(size_t bytes);
  // Returns a block obtained from Acquire(bytes) with the same `bytes`.
  void Release(void* block, size_t bytes);

  // Statistics, for tests, logs and Backend::stats(); callable from any thread.
  size_t cached_bytes() const;
  size_t system_allocations() const;
  // Bytes in blocks handed out and not yet released (size-class sizes).
  size_t in_use_bytes() const { return in_use_bytes_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t system_allocations_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> in_use_bytes_{0};
};

class CpuBuffer final : public Buffer {
 public:
  CpuBuffer(std::shared_ptr<CpuMemoryPool> pool, void* data, size_t size_bytes)
      : pool_(std::move(pool)), data_(data), size_bytes_(size_bytes) {}
  ~CpuBuffer() override { pool_->Release(data_, size_bytes_); }
  void* data() override { return data_; }
  size_t size_bytes() const override { return size_bytes_; }
  DeviceKind device() const override { return DeviceKind::kCpu; }

 private:
  std::shared_ptr<CpuMemoryPool> pool_;
  void* data_;
  size_t size_bytes_;
};

// A tensor of `shape` in a new pooled buffer; InvalidArgument for negative or overflowing
// shapes, ResourceExhausted when memory runs out.
absl::StatusOr<Tensor> AllocateCpuTensor(const std::shared_ptr<CpuMemoryPool>& pool,
                                         const Shape& shape, DType dtype);

}  // namespace waav::cpu
