// ThreadPool: worker threads for fork-join loops (the CPU backend's kernels; the streaming
// scheduler's per-window preparation).
//
// A fork-join pool sized once: `num_threads` participants, the calling thread being one of
// them, so N threads means N − 1 workers. ParallelFor splits a range into at most N contiguous
// chunks that participants claim from a shared counter: when a worker is slow to start (the
// cores are shared with other processes), the caller runs its chunks instead of waiting. Each
// chunk is told which participant runs it, for per-thread scratch.
// Workers spin briefly after each job (decoder steps issue kernels microseconds apart, and a
// wake-up from sleep costs more than that), then sleep on a condition variable.
//
// One job at a time: a pool is driven by one thread (the one that owns the backend, or the
// scheduler). A ParallelFor
// issued from inside a running job runs serially on the calling thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace waav {

class ThreadPool {
 public:
  // `num_threads` <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n), in parallel; returns when all
  // are done. Chunks hold at least `grain` items (the last may hold fewer), so small ranges
  // are not spread over threads that would mostly wait.
  void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn, int64_t grain = 1);
  // As ParallelFor, also passing the index in [0, num_threads()) of the participant running the
  // chunk; one participant may run several chunks, one after the other.
  void ParallelForIndexed(int64_t n, absl::FunctionRef<void(int, int64_t, int64_t)> fn,
                          int64_t grain = 1);

 private:
  void WorkerLoop(int index);
  // Claims and runs chunks of the current job until none is left.
  void RunChunks(int participant);
  // Starts the published job (or stop): bumps the generation and wakes sleeping workers.
  void Publish();

  const int num_threads_;
  std::vector<std::thread> workers_;

  // The current job. `claims_` holds the job's chunk count (high 32 bits) and the next chunk to
  // hand out (low 32 bits); it is reset for each job after job_ and job_n_ are written, so a
  // claim that returns chunk < count belongs to the current job and sees its fields, and a late
  // worker's claim on a finished job returns chunk >= count and runs nothing.
  const absl::FunctionRef<void(int, int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  std::atomic<uint64_t> claims_{0};
  std::atomic<int> done_chunks_{0};
  std::atomic<uint32_t> generation_{0};  // bumped per job to wake workers
  std::atomic<bool> stop_{false};
  // Sleeping workers wait on `wake_`; `sleepers_` lets Publish skip the lock when none sleeps.
  // Both sides use seq_cst on generation_/sleepers_, so either the worker sees the new generation
  // before it sleeps or Publish sees the sleeper and notifies under the mutex.
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

}  // namespace waav
