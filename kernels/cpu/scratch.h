// Per-thread scratch space for the CPU kernels. Kept apart from cpu_memory.h so that the kernel
// sources (compiled with -march=${WAAV_CPU_ARCH}) include no inline library code that the
// baseline-compiled backend also uses.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

namespace waav::cpu {

// Growable, 64-byte-aligned float scratch, one slot per pool participant plus one shared slot
// (index num_threads) for the calling thread's data that all participants read. A slot is only
// touched by its own thread while a job runs, so Get needs no lock. Contents do not persist
// across calls that may grow the slot.
class Scratch {
 public:
  explicit Scratch(int num_slots);
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // At least `floats` floats, or nullptr when memory runs out; a kernel that gets nullptr
  // returns early and the backend reports the failure (TakeFailure) as ResourceExhausted.
  float* Get(int slot, size_t floats);
  // Whether a Get failed since the last call.
  bool TakeFailure() { return failed_.exchange(false, std::memory_order_relaxed); }

 private:
  struct Slot {
    std::unique_ptr<float, void (*)(void*)> data{nullptr, nullptr};
    size_t capacity = 0;
  };
  std::vector<Slot> slots_;
  std::atomic<bool> failed_{false};
};

}  // namespace waav::cpu
