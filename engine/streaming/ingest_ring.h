// IngestRing: the bounded, lock-free multi-producer / single-consumer queue that carries audio
// from network threads to the frontend worker.
//
// Producers (gRPC reactors) claim a slot, copy up to kSlotSamples samples into it and publish
// it; they never wait for the consumer and never allocate. A full ring is reported, not waited
// on: the caller applies back-pressure. The consumer is woken through a doorbell. Slots are
// sequence-numbered cells (Vyukov's bounded queue): each cell's sequence says whether it is free
// for the producer of ticket t (seq == t) or holds data for the consumer (seq == t + 1).
//
// The CPU consumer is a thread; a device build replaces this with pinned host memory mapped into
// the GPU and a persistent kernel polling the same cell protocol, behind the same Push API.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/types/span.h"

namespace waav::streaming {

struct IngestChunk {
  static constexpr int kSlotSamples = 1600;  // 100 ms at 16 kHz
  uint64_t stream_id = 0;
  int64_t enqueue_ns = 0;                    // monotonic time the producer published it
  int num_samples = 0;
  bool end_of_stream = false;                // no samples; marks Finish()
  float samples[kSlotSamples];
};

class IngestRing {
 public:
  // `capacity` is rounded up to a power of two.
  explicit IngestRing(size_t capacity);

  // Publishes `samples` for `stream_id` in as many slots as needed. Either all of them are
  // published or none (returns false: the ring is full). Wakes the consumer.
  bool Push(uint64_t stream_id, absl::Span<const float> samples, int64_t now_ns);
  bool PushEndOfStream(uint64_t stream_id, int64_t now_ns);

  // Consumer: moves up to `max` published chunks into `out` (in publication order per stream).
  size_t Drain(std::vector<IngestChunk>* out, size_t max);
  // Consumer: waits until something is published, `deadline_ns` passes or Close() is called.
  void WaitForWork(int64_t timeout_ns);
  void Close();
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  size_t capacity() const { return cells_.size(); }
  // Published but not yet drained chunks (approximate, for metrics).
  size_t depth() const;

 private:
  struct Cell {
    std::atomic<uint64_t> sequence;
    IngestChunk chunk;
  };
  bool Reserve(size_t count, uint64_t* first_ticket);
  void Ring();

  std::vector<Cell> cells_;
  uint64_t mask_;
  alignas(64) std::atomic<uint64_t> tail_{0};  // next ticket for producers
  alignas(64) uint64_t head_ = 0;              // consumer's next ticket
  alignas(64) std::atomic<bool> doorbell_{false};
  std::atomic<bool> closed_{false};
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
};

}  // namespace waav::streaming
