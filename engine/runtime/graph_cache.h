// Runs a fixed sequence of backend calls through a graph captured on first use and replayed
// afterwards (Backend::BeginCapture / EndCapture / Graph::Replay).
//
// A graph replays its calls on the tensors it was captured with. The cache therefore keys each
// graph on the memory the calls use: the data address, element count and type of every tensor
// named at Run(). A call with another key (a tensor was reallocated, or another state is used)
// captures a new graph; the least recently used one is dropped when the cache is full. Because a
// graph keeps the tensors it captured alive, their memory cannot be handed to a new tensor while
// the graph exists, so equal keys always mean the same memory.
//
// Values the calls read (tokens, positions, lengths, mel frames) must live in device tensors that
// the caller writes before each Run(); C++ scalars are frozen into the graph at capture.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/runtime/backend.h"

namespace waav {

class GraphCache {
 public:
  // At most `capacity` graphs (≥ 1) are kept.
  explicit GraphCache(size_t capacity = 1) : capacity_(capacity < 1 ? 1 : capacity) {}
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // Runs `record` (which issues the calls on `backend` and nothing else: no host copies, no
  // waits, no allocation the graph should not own) through the graph for `tensors`, capturing
  // it first when there is none. Without `use_graph`, or when the backend cannot capture
  // (Unimplemented), `record` runs eagerly. A call that fails during capture fails Run with its
  // error and leaves no graph.
  absl::Status Run(Backend& backend, bool use_graph, absl::Span<const Tensor* const> tensors,
                   const std::function<absl::Status()>& record);

  // Graphs held, and captures made so far (for tests and metrics).
  size_t size() const { return entries_.size(); }
  uint64_t captures() const { return captures_; }
  void Clear() { entries_.clear(); }

 private:
  struct Entry {
    std::vector<uintptr_t> key;
    std::unique_ptr<Graph> graph;
    uint64_t last_used = 0;
  };
  const size_t capacity_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  uint64_t captures_ = 0;
  bool unsupported_ = false;  // the backend answered Unimplemented once
};

}  // namespace waav
