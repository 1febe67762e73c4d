// Graphs of the CUDA backend (Backend::BeginCapture / EndCapture).
//
// What a graph is: the kernel calls issued between BeginCapture and EndCapture, recorded as
// closures that own their tensors (and any scratch memory the calls needed), so the memory a
// graph reads and writes stays allocated as long as the graph lives. Two ways to replay them:
//  * CUDA graph (default): while capturing, the closures run once on the backend's stream under
//    stream capture (cudaStreamCaptureModeRelaxed); EndCapture instantiates the captured graph
//    and Replay() is one cudaGraphLaunch. The closures are kept only for ownership.
//  * Eager (CudaBackendOptions::use_graphs = false, the switch that disables CUDA graphs): the
//    closures are only recorded, and Replay() runs them again one by one, issuing every kernel.
//    For debugging, for platforms whose graph support misbehaves, and to measure what graphs
//    save.
//
// Cache key and re-instantiation: instantiating a graph costs far more than launching it, and a
// scheduler may capture the same step again (e.g. after reallocating its buffers). Each capture
// has a signature: a hash of the sequence of kernel calls with their ops, shapes, dtypes and
// options, but not their addresses. When a graph is destroyed its executable is kept (up to
// kMaxCachedExecs, oldest dropped) under that signature. A new capture with the same signature
// takes the cached executable and updates it with cudaGraphExecUpdate (new addresses, same
// topology); if the update is refused (the topology differed after all, e.g. cuBLAS chose other
// kernels) the executable is destroyed and the new graph instantiated from scratch.
//
// RAII: destroying a CudaGraph destroys its cudaGraph_t, returns (or destroys) its executable and
// releases its closures and with them its memory. Graphs may outlive the backend: they share its
// stream and caches through a shared_ptr.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"
#include "kernels/cuda/gpu.h"

namespace waav::cuda {

using Node = std::function<absl::Status()>;

// Executables of destroyed graphs, by signature.
class ExecCache {
 public:
  static constexpr size_t kMaxCachedExecs = 8;
  ~ExecCache();
  // An executable captured with `signature`, removed from the cache, or null.
  cudaGraphExec_t Take(uint64_t signature);
  void Put(uint64_t signature, cudaGraphExec_t exec);

  // Statistics for tests: instantiations avoided by a successful update.
  int updates() const;
  void CountUpdate();

 private:
  mutable std::mutex mu_;
  std::deque<std::pair<uint64_t, cudaGraphExec_t>> entries_ ABSL_GUARDED_BY(mu_);
  int updates_ ABSL_GUARDED_BY(mu_) = 0;
};

// What graphs share with the backend that made them.
struct GraphRuntime {
  GraphRuntime() = default;
  GraphRuntime(const GraphRuntime&) = delete;
  GraphRuntime& operator=(const GraphRuntime&) = delete;
  ~GraphRuntime() {
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
  cudaStream_t stream = nullptr;  // owned
  int device = 0;                 // the stream's GPU (UseDevice before a replay)
  ExecCache exec_cache;
  // BackendStats' counters (relaxed: they order nothing): eager kernel calls, and replays.
  std::atomic<uint64_t> kernel_launches{0};
  std::atomic<uint64_t> graph_replays{0};
};

class CudaGraph final : public Graph {
 public:
  // A CUDA graph: `graph` was captured from `nodes` with `signature`; instantiates (or updates a
  // cached executable).
  static absl::StatusOr<std::unique_ptr<CudaGraph>> Instantiate(
      std::shared_ptr<GraphRuntime> runtime, cudaGraph_t graph, uint64_t signature,
      std::vector<Node> nodes);
  // An eager graph: Replay() runs `nodes` again.
  static std::unique_ptr<CudaGraph> Eager(std::shared_ptr<GraphRuntime> runtime,
                                          std::vector<Node> nodes);
  ~CudaGraph() override;

  absl::Status Replay() override;
  int num_nodes() const override { return static_cast<int>(nodes_.size()); }
  bool is_cuda_graph() const { return exec_ != nullptr; }

 private:
  CudaGraph(std::shared_ptr<GraphRuntime> runtime, std::vector<Node> nodes)
      : runtime_(std::move(runtime)), nodes_(std::move(nodes)) {}

  std::shared_ptr<GraphRuntime> runtime_;
  std::vector<Node> nodes_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  uint64_t signature_ = 0;
};

// FNV-1a, for capture signatures.
inline uint64_t HashCombine(uint64_t seed, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) seed = (seed ^ p[i]) * 1099511628211ull;
  return seed;
}
inline constexpr uint64_t kHashSeed = 14695981039346656037ull;

}  // namespace waav::cuda
