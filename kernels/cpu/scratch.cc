#include "kernels/cpu/scratch.h"

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/cpu_memory.h"

namespace waav::cpu {

Scratch::Scratch(int num_slots) : slots_(static_cast<size_t>(num_slots)) {}

float* Scratch::Get(int slot, size_t floats) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (floats > s.capacity) {
    // Grow geometrically so a slowly growing request (a KV cache filling up) reallocates rarely.
    const size_t capacity = std::max(floats, s.capacity + s.capacity / 2);
    const size_t bytes = CpuMemoryPool::SizeClass(capacity * sizeof(float));
    s.data = {static_cast<float*>(std::aligned_alloc(kCpuAlignment, bytes)), &std::free};
    s.capacity = s.data ? bytes / sizeof(float) : 0;
    if (!s.data) failed_.store(true, std::memory_order_relaxed);
  }
  return s.data.get();
}

}  // namespace waav::cpu
