#include "engine/runtime/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace waav {
namespace {

// How long an idle worker polls for the next job before it sleeps. Long enough to bridge the
// gaps between the kernels of one decoder step, short enough not to burn a core between steps.
constexpr auto kSpinTime = std::chrono::microseconds(100);
// Polls between clock reads; polls before the waiting caller starts yielding.
constexpr int kPollsPerClockRead = 64;
constexpr int kCallerPollsBeforeYield = 1 << 14;

// Participant index of this thread in a running job, or -1 outside any job. Used to run a
// nested ParallelFor serially under the right index.
thread_local int t_participant = -1;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0
                       ? num_threads
                       : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  workers_.reserve(static_cast<size_t>(num_threads_ - 1));
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  Publish();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t n, absl::FunctionRef<void(int64_t, int64_t)> fn,
                             int64_t grain) {
  ParallelForIndexed(
      n, [&fn](int, int64_t begin, int64_t end) { fn(begin, end); }, grain);
}

void ThreadPool::ParallelForIndexed(int64_t n, absl::FunctionRef<void(int, int64_t, int64_t)> fn,
                                    int64_t grain) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int chunks = static_cast<int>(std::min<int64_t>(num_threads_, max_chunks));
  if (chunks <= 1 || t_participant >= 0) {
    fn(std::max(t_participant, 0), 0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  done_chunks_.store(0, std::memory_order_relaxed);
  claims_.store(static_cast<uint64_t>(chunks) << 32, std::memory_order_release);
  Publish();

  t_participant = 0;
  RunChunks(0);
  t_participant = -1;

  for (int polls = 0; done_chunks_.load(std::memory_order_acquire) != chunks; ++polls) {
    if (polls < kCallerPollsBeforeYield) {
      CpuRelax();
    } else {
      std::this_thread::yield();  // a worker was preempted mid-chunk: give it the core
    }
  }
  job_ = nullptr;
}

void ThreadPool::Publish() {
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard lock(mu_); }  // a sleeper is either waiting already or will see the bump
    wake_.notify_all();
  }
}

void ThreadPool::RunChunks(int participant) {
  while (true) {
    const uint64_t claim = claims_.fetch_add(1, std::memory_order_acq_rel);
    const int64_t chunk = static_cast<int64_t>(claim & 0xffffffffu);
    const int64_t chunks = static_cast<int64_t>(claim >> 32);
    if (chunk >= chunks) return;
    (*job_)(participant, job_n_ * chunk / chunks, job_n_ * (chunk + 1) / chunks);
    done_chunks_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::WorkerLoop(int index) {
  t_participant = index;
  // The generation at construction, not at thread start: a job (or stop) may already be
  // published before this thread first runs.
  uint32_t seen = 0;
  while (true) {
    uint32_t current = generation_.load(std::memory_order_acquire);
    if (current == seen) {
      const auto spin_start = std::chrono::steady_clock::now();
      for (int polls = 1;; ++polls) {
        current = generation_.load(std::memory_order_acquire);
        if (current != seen) break;
        CpuRelax();
        if (polls % kPollsPerClockRead == 0 &&
            std::chrono::steady_clock::now() - spin_start > kSpinTime) {
          std::unique_lock lock(mu_);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
          sleepers_.fetch_sub(1, std::memory_order_relaxed);
        }
      }
    }
    seen = current;
    if (stop_.load(std::memory_order_relaxed)) return;
    RunChunks(index);
  }
}

}  // namespace waav
