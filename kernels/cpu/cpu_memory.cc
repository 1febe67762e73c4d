#include "kernels/cpu/cpu_memory.h"

#include <bit>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"

namespace waav::cpu {

CpuMemoryPool::~CpuMemoryPool() {
  for (auto& [size, blocks] : free_) {
    for (void* block : blocks) std::free(block);
  }
}

size_t CpuMemoryPool::SizeClass(size_t bytes) {
  constexpr size_t kSmall = 4096;
  if (bytes <= kSmall)
    return std::max(kCpuAlignment, (bytes + kCpuAlignment - 1) & ~(kCpuAlignment - 1));
  // 8 classes per power of two: the step is 1/8 of the largest power of two <= bytes.
  const size_t step = std::bit_floor(bytes) / 8;
  return (bytes + step - 1) / step * step;
}

void* CpuMemoryPool::Acquire(size_t bytes) {
  const size_t size = SizeClass(bytes);
  {
    std::lock_guard lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= size;
      in_use_bytes_.fetch_add(size, std::memory_order_relaxed);
      return block;
    }
    ++system_allocations_;
  }
  void* block = std::aligned_alloc(kCpuAlignment, size);
  if (block != nullptr) in_use_bytes_.fetch_add(size, std::memory_order_relaxed);
  return block;
}

void CpuMemoryPool::Release(void* block, size_t bytes) {
  if (block == nullptr) return;
  const size_t size = SizeClass(bytes);
  in_use_bytes_.fetch_sub(size, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  free_[size].push_back(block);
  cached_bytes_ += size;
}

size_t CpuMemoryPool::cached_bytes() const {
  std::lock_guard lock(mu_);
  return cached_bytes_;
}

size_t CpuMemoryPool::system_allocations() const {
  std::lock_guard lock(mu_);
  return system_allocations_;
}

absl::StatusOr<Tensor> AllocateCpuTensor(const std::shared_ptr<CpuMemoryPool>& pool,
                                         const Shape& shape, DType dtype) {
  // Refuse sizes that cannot be meant (and whose byte count would overflow).
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
    return absl::ResourceExhaustedError(absl::StrCat("Allocate: out of host memory for ",
                                                     std::string(DTypeName(dtype)),
                                                     shape.ToString(), " (", bytes, " bytes)"));
  }
  return Tensor(std::make_shared<CpuBuffer>(pool, block, bytes), 0, shape, dtype);
}

}  // namespace waav::cpu
