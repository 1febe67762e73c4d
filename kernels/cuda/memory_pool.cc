#include "kernels/cuda/memory_pool.h"

#include <bit>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/gpu.h"

namespace waav::cuda {

DevicePool::~DevicePool() {
  std::lock_guard lock(mu_);
  FreeCachedLocked();
}

void DevicePool::FreeCachedLocked() {
  // cudaFree waits for the device: nothing queued can still use these blocks afterwards.
  (void)cudaSetDevice(device_);
  for (auto& [size, blocks] : free_) {
    for (void* block : blocks) (void)cudaFree(block);
  }
  free_.clear();
  cached_bytes_ = 0;
}

size_t DevicePool::SizeClass(size_t bytes) {
  constexpr size_t kSmall = 64 * 1024;
  if (bytes <= kSmall) {
    return std::max(kDeviceAlignment, (bytes + kDeviceAlignment - 1) & ~(kDeviceAlignment - 1));
  }
  const size_t step = std::bit_floor(bytes) / 8;
  return (bytes + step - 1) / step * step;
}

void* DevicePool::Acquire(size_t bytes) {
  const size_t size = SizeClass(bytes);
  std::lock_guard lock(mu_);
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    void* block = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= size;
    in_use_bytes_.fetch_add(size, std::memory_order_relaxed);
    return block;
  }
  (void)cudaSetDevice(device_);
  void* block = nullptr;
  if (cudaMalloc(&block, size) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error state of the runtime API
    FreeCachedLocked();
    if (cudaMalloc(&block, size) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
  }
  ++system_allocations_;
  in_use_bytes_.fetch_add(size, std::memory_order_relaxed);
  return block;
}

void DevicePool::Release(void* block, size_t bytes) {
  if (block == nullptr) return;
  const size_t size = SizeClass(bytes);
  in_use_bytes_.fetch_sub(size, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  free_[size].push_back(block);
  cached_bytes_ += size;
}

size_t DevicePool::cached_bytes() const {
  std::lock_guard lock(mu_);
  return cached_bytes_;
}

size_t DevicePool::system_allocations() const {
  std::lock_guard lock(mu_);
  return system_allocations_;
}

absl::StatusOr<Tensor> AllocateDeviceTensor(const std::shared_ptr<DevicePool>& pool,
                                            const Shape& shape, DType dtype) {
  constexpr int64_t kMaxBytes = int64_t{1} << 44;
  int64_t numel = 1;
  for (int64_t d : shape.dims()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Allocate: negative dimension in shape ", shape.ToString()));
    }
    if (d != 0 && numel > kMaxBytes / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("Allocate: shape ", shape.ToString(), " is too large"));
    }
    numel *= d;
  }
  const size_t bytes = static_cast<size_t>(numel) * SizeOf(dtype);
  if (bytes > static_cast<size_t>(kMaxBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Allocate: shape ", shape.ToString(), " is too large"));
  }
  void* block = pool->Acquire(bytes);
  if (block == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("Allocate: out of device memory for ",
                                                     std::string(DTypeName(dtype)),
                                                     shape.ToString(), " (", bytes, " bytes)"));
  }
  return Tensor(std::make_shared<DeviceBuffer>(pool, block, bytes), 0, shape, dtype);
}

}  // namespace waav::cuda
