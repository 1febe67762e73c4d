// Decoder states for batches of 1..max_batch windows, all over one set of max_batch cache slots.
//
// The slots (cross- and self-attention caches, step buffers) are allocated once. A batch of n
// windows runs on the state of the smallest bucket (1, 2, 4, ..., max_batch) that holds n: the
// view of slots [0, bucket), created once with the pool and reused, so nothing is allocated per
// batch and a graph captured per bucket keeps its addresses. Row(b) is slot b alone (batch 1),
// to encode a window into it and prefill its prompt.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/host_buffer.h"

namespace waav::whisper {

class DecoderStatePool {
 public:
  // max_batch slots for `model` (tiny.en: about 24 MB each in f32), zeroed.
  static absl::StatusOr<std::unique_ptr<DecoderStatePool>> Create(const WhisperModel& model,
                                                                  int max_batch);

  int max_batch() const { return static_cast<int>(rows_.size()); }
  // The batch size `rows` windows run at: the smallest bucket ≥ rows (1 ≤ rows ≤ max_batch).
  int BucketFor(int rows) const;
  // Slots [0, BucketFor(rows)) as one state.
  DecoderState& ForRows(int rows);
  // Slot `row` alone, batch 1 (0 ≤ row < max_batch).
  DecoderState& Row(int row) { return *rows_[static_cast<size_t>(row)]; }
  // Slots [begin, begin + size) as one state (0 ≤ begin, begin + size ≤ max_batch), created on
  // first use and kept, so that a graph captured on it (the batched encoder's cross-attention
  // K/V projection) keeps its addresses. Not thread-safe (the scheduler's thread calls it).
  absl::StatusOr<DecoderState*> Range(int begin, int size);

  // A device tensor kept with the pool under `key`, one at a time: `make` builds it when `key`
  // differs from the kept one's (or on an error, nothing is kept). For a batch's constants that
  // depend only on its options (DecodeGreedyBatch's token masks), built once, not every batch.
  absl::StatusOr<Tensor> Constant(const std::string& key,
                                  const std::function<absl::StatusOr<Tensor>()>& make);

  // Host memory of at least `bytes` kept with the pool (Backend::AllocateHost: page-locked on a
  // GPU), where DecodeGreedyBatch's pipelined steps receive their choices: it outlives any copy
  // still in flight when a call returns early. Reallocated only when too small: do not call it
  // while a copy into it may be in flight. Not thread-safe.
  absl::StatusOr<HostBuffer*> HostScratch(size_t bytes);

  // Device buffers of DecodeGreedyBatch's greedy choice kept with the pool, so that the graphs
  // captured on them (WhisperModel::RunDecodeStepAndChoose) serve every later batch: mask
  // indices i32 [max_batch] and two buffers of choices f32 [max_batch, 5] (a step's, while the
  // one before it is still being downloaded). Allocated on first use.
  struct ChoiceBuffers {
    Tensor mask_index;
    std::array<Tensor, 2> out;
  };
  absl::StatusOr<const ChoiceBuffers*> Choice();

  // A download into HostScratch from Choice()'s buffers that a batch left running when it
  // returned (Backend::CopyToHostAsync's ticket: a step submitted ahead whose rows had all
  // ended), waited for by WaitForLeftCopy (every DecodeGreedyBatch calls it first, before it
  // writes those buffers again) or when the pool is destroyed. Ticket 0 (a backend whose copies
  // are done on return) leaves nothing.
  void LeaveCopy(uint64_t ticket) {
    if (ticket != 0) left_copy_ = ticket;
  }
  absl::Status WaitForLeftCopy();

  ~DecoderStatePool();

 private:
  DecoderStatePool() = default;

  Backend* backend_ = nullptr;
  HostBuffer host_scratch_;
  ChoiceBuffers choice_;
  std::optional<uint64_t> left_copy_;
  std::unique_ptr<DecoderState> slots_;
  std::vector<std::unique_ptr<DecoderState>> buckets_;  // ascending batch sizes
  std::vector<std::unique_ptr<DecoderState>> rows_;
  std::map<std::pair<int, int>, std::unique_ptr<DecoderState>> ranges_;  // (begin, size)
  std::string constant_key_;
  Tensor constant_;
};

}  // namespace waav::whisper
