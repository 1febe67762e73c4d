#include "engine/runtime/graph_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"

namespace waav {

absl::Status GraphCache::Run(Backend& backend, bool use_graph,
                             absl::Span<const Tensor* const> tensors,
                             const std::function<absl::Status()>& record) {
  if (!use_graph || unsupported_ || !backend.supports(Op::kGraphCapture)) return record();
  std::vector<uintptr_t> key;
  key.reserve(tensors.size() * 3);
  for (const Tensor* t : tensors) {
    key.push_back(t->defined() ? reinterpret_cast<uintptr_t>(t->data()) : 0);
    key.push_back(t->defined() ? static_cast<uintptr_t>(t->numel()) : 0);
    key.push_back(t->defined() ? static_cast<uintptr_t>(t->dtype()) : 0);
  }
  ++clock_;
  for (Entry& entry : entries_) {
    if (entry.key == key) {
      entry.last_used = clock_;
      return entry.graph->Replay();
    }
  }
  const absl::Status begin = backend.BeginCapture();
  if (absl::IsUnimplemented(begin)) {
    unsupported_ = true;
    return record();
  }
  RETURN_IF_ERROR(begin);
  const absl::Status recorded = record();
  // The capture must end even when a call failed, or the backend stays in capture mode.
  absl::StatusOr<std::unique_ptr<Graph>> graph = backend.EndCapture();
  RETURN_IF_ERROR(recorded);
  if (!graph.ok()) {
    return absl::Status(graph.status().code(),
                        absl::StrCat("graph capture: ", graph.status().message()));
  }
  ++captures_;
  if (entries_.size() >= capacity_) {
    entries_.erase(
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; }));
  }
  entries_.push_back(Entry{std::move(key), std::move(*graph), clock_});
  // A capture records the calls without running them (on every backend that captures here).
  return entries_.back().graph->Replay();
}

}  // namespace waav
