#include "kernels/cuda/graph.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch.h"

namespace waav::cuda {
namespace {

absl::Status GpuError(const char* what, cudaError_t err) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// cudaGraphExecUpdate changed its signature in CUDA 12; HIP kept the old one.
bool TryUpdate(cudaGraphExec_t exec, cudaGraph_t graph) {
#if defined(WAAV_HIP)
  hipGraphNode_t error_node = nullptr;
  hipGraphExecUpdateResult result;
  const bool ok = hipGraphExecUpdate(exec, graph, &error_node, &result) == hipSuccess &&
                  result == hipGraphExecUpdateSuccess;
#else
  cudaGraphExecUpdateResultInfo info;
  const bool ok = cudaGraphExecUpdate(exec, graph, &info) == cudaSuccess &&
                  info.result == cudaGraphExecUpdateSuccess;
#endif
  if (!ok)
    (void)cudaGetLastError();  // a refused update leaves an error to clear, not a broken context
  return ok;
}

}  // namespace

ExecCache::~ExecCache() {
  std::lock_guard lock(mu_);
  for (auto& [signature, exec] : entries_) (void)cudaGraphExecDestroy(exec);
}

cudaGraphExec_t ExecCache::Take(uint64_t signature) {
  std::lock_guard lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->first == signature) {
      cudaGraphExec_t exec = it->second;
      entries_.erase(it);
      return exec;
    }
  }
  return nullptr;
}

void ExecCache::Put(uint64_t signature, cudaGraphExec_t exec) {
  std::lock_guard lock(mu_);
  entries_.emplace_back(signature, exec);
  while (entries_.size() > kMaxCachedExecs) {
    (void)cudaGraphExecDestroy(entries_.front().second);
    entries_.pop_front();
  }
}

int ExecCache::updates() const {
  std::lock_guard lock(mu_);
  return updates_;
}

void ExecCache::CountUpdate() {
  std::lock_guard lock(mu_);
  ++updates_;
}

absl::StatusOr<std::unique_ptr<CudaGraph>> CudaGraph::Instantiate(
    std::shared_ptr<GraphRuntime> runtime, cudaGraph_t graph, uint64_t signature,
    std::vector<Node> nodes) {
  auto result = std::unique_ptr<CudaGraph>(new CudaGraph(runtime, std::move(nodes)));
  result->graph_ = graph;
  result->signature_ = signature;
  if (cudaGraphExec_t cached = runtime->exec_cache.Take(signature); cached != nullptr) {
    if (TryUpdate(cached, graph)) {
      runtime->exec_cache.CountUpdate();
      result->exec_ = cached;
      return result;
    }
    (void)cudaGraphExecDestroy(cached);
  }
  if (cudaError_t err = cudaGraphInstantiate(&result->exec_, graph, 0); err != cudaSuccess) {
    result->exec_ = nullptr;
    return GpuError("cudaGraphInstantiate", err);
  }
  return result;
}

std::unique_ptr<CudaGraph> CudaGraph::Eager(std::shared_ptr<GraphRuntime> runtime,
                                            std::vector<Node> nodes) {
  return std::unique_ptr<CudaGraph>(new CudaGraph(std::move(runtime), std::move(nodes)));
}

CudaGraph::~CudaGraph() {
  if (exec_ != nullptr) runtime_->exec_cache.Put(signature_, exec_);
  if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
}

absl::Status CudaGraph::Replay() {
  UseDevice(runtime_->device);
  runtime_->graph_replays.fetch_add(1, std::memory_order_relaxed);
  if (exec_ != nullptr) {
    if (cudaError_t err = cudaGraphLaunch(exec_, runtime_->stream); err != cudaSuccess) {
      return GpuError("cudaGraphLaunch", err);
    }
    return absl::OkStatus();
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    absl::Status status = nodes_[i]();
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("graph node ", i, " of ", nodes_.size(), ": ",
                                                      status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace waav::cuda
