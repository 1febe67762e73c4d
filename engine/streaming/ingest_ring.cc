#include "engine/streaming/ingest_ring.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace waav::streaming {

IngestRing::IngestRing(size_t capacity) {
  size_t size = 2;
  while (size < capacity) size <<= 1;
  cells_ = std::vector<Cell>(size);
  for (size_t i = 0; i < size; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
  mask_ = size - 1;
}

// Claims `count` consecutive tickets, all of whose cells are free. Multi-slot pushes claim a
// contiguous run so one stream's chunks stay in order even with other producers in between.
bool IngestRing::Reserve(size_t count, uint64_t* first_ticket) {
  uint64_t tail = tail_.load(std::memory_order_relaxed);
  for (;;) {
    // The cell of the last ticket must be free (the cells before it then are too: the consumer
    // frees in ticket order).
    const Cell& last = cells_[(tail + count - 1) & mask_];
    const uint64_t seq = last.sequence.load(std::memory_order_acquire);
    if (count > cells_.size() || seq < tail + count - 1) return false;  // full
    if (seq > tail + count - 1) {
      tail = tail_.load(std::memory_order_relaxed);  // another producer moved on
      continue;
    }
    const Cell& first = cells_[tail & mask_];
    if (first.sequence.load(std::memory_order_acquire) != tail) {
      tail = tail_.load(std::memory_order_relaxed);
      continue;
    }
    if (tail_.compare_exchange_weak(tail, tail + count, std::memory_order_relaxed)) {
      *first_ticket = tail;
      return true;
    }
  }
}

bool IngestRing::Push(uint64_t stream_id, absl::Span<const float> samples, int64_t now_ns) {
  if (samples.empty()) return true;
  const size_t count = (samples.size() + IngestChunk::kSlotSamples - 1) / IngestChunk::kSlotSamples;
  uint64_t ticket;
  if (closed() || !Reserve(count, &ticket)) return false;
  for (size_t i = 0; i < count; ++i) {
    Cell& cell = cells_[(ticket + i) & mask_];
    const size_t offset = i * IngestChunk::kSlotSamples;
    const size_t n = std::min<size_t>(IngestChunk::kSlotSamples, samples.size() - offset);
    cell.chunk.stream_id = stream_id;
    cell.chunk.enqueue_ns = now_ns;
    cell.chunk.num_samples = static_cast<int>(n);
    cell.chunk.end_of_stream = false;
    std::memcpy(cell.chunk.samples, samples.data() + offset, n * sizeof(float));
    cell.sequence.store(ticket + i + 1, std::memory_order_release);
  }
  Ring();
  return true;
}

bool IngestRing::PushEndOfStream(uint64_t stream_id, int64_t now_ns) {
  uint64_t ticket;
  if (closed() || !Reserve(1, &ticket)) return false;
  Cell& cell = cells_[ticket & mask_];
  cell.chunk.stream_id = stream_id;
  cell.chunk.enqueue_ns = now_ns;
  cell.chunk.num_samples = 0;
  cell.chunk.end_of_stream = true;
  cell.sequence.store(ticket + 1, std::memory_order_release);
  Ring();
  return true;
}

size_t IngestRing::Drain(std::vector<IngestChunk>* out, size_t max) {
  size_t drained = 0;
  while (drained < max) {
    Cell& cell = cells_[head_ & mask_];
    if (cell.sequence.load(std::memory_order_acquire) != head_ + 1) break;  // not published
    out->push_back(cell.chunk);
    cell.sequence.store(head_ + cells_.size(), std::memory_order_release);  // free for next lap
    ++head_;
    ++drained;
  }
  return drained;
}

void IngestRing::Ring() {
  if (!doorbell_.exchange(true, std::memory_order_acq_rel)) {
    std::lock_guard lock(wait_mu_);
    wait_cv_.notify_one();
  }
}

void IngestRing::WaitForWork(int64_t timeout_ns) {
  if (doorbell_.exchange(false, std::memory_order_acq_rel)) return;
  std::unique_lock lock(wait_mu_);
  wait_cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), [&] {
    return doorbell_.load(std::memory_order_acquire) || closed();
  });
  doorbell_.store(false, std::memory_order_release);
}

void IngestRing::Close() {
  closed_.store(true, std::memory_order_release);
  std::lock_guard lock(wait_mu_);
  wait_cv_.notify_all();
}

size_t IngestRing::depth() const {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  return tail >= head_ ? static_cast<size_t>(tail - head_) : 0;
}

}  // namespace waav::streaming
