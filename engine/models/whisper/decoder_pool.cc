#include "engine/models/whisper/decoder_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"

namespace waav::whisper {

absl::StatusOr<std::unique_ptr<DecoderStatePool>> DecoderStatePool::Create(
    const WhisperModel& model, int max_batch) {
  if (max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a decoder pool needs at least one slot; got ", max_batch));
  }
  auto pool = std::unique_ptr<DecoderStatePool>(new DecoderStatePool());
  pool->backend_ = &model.backend();
  ASSIGN_OR_RETURN(pool->slots_, model.NewDecoderState(max_batch));
  // Zeroed so that a row nobody has encoded into yet (a bucket's unused rows, which a step
  // computes but nobody reads) holds finite values.
  const DecoderState& s = *pool->slots_;
  Backend& backend = model.backend();
  std::vector<char> zeros;
  for (int layer = 0; layer < model.dims().n_decoder_layers; ++layer) {
    for (const Tensor* t :
         {&s.cross_k(layer), &s.cross_v(layer), &s.self_k(layer), &s.self_v(layer)}) {
      zeros.resize(std::max(zeros.size(), t->size_bytes()), 0);
      RETURN_IF_ERROR(backend.CopyFromHost(zeros.data(), t->size_bytes(), *t));
    }
  }
  for (const Tensor* t : {&s.cross_source(), &s.cross_source_scales()}) {
    if (!t->defined()) continue;
    zeros.resize(std::max(zeros.size(), t->size_bytes()), 0);
    RETURN_IF_ERROR(backend.CopyFromHost(zeros.data(), t->size_bytes(), *t));
  }
  for (int bucket = 1;; bucket *= 2) {
    const int size = std::min(bucket, max_batch);
    ASSIGN_OR_RETURN(auto view, pool->slots_->Rows(0, size));
    pool->buckets_.push_back(std::move(view));
    if (size == max_batch) break;
  }
  for (int row = 0; row < max_batch; ++row) {
    ASSIGN_OR_RETURN(auto view, pool->slots_->Rows(row, row + 1));
    pool->rows_.push_back(std::move(view));
  }
  RETURN_IF_ERROR(backend.Synchronize());
  return pool;
}

absl::StatusOr<DecoderState*> DecoderStatePool::Range(int begin, int size) {
  if (size == 1 && begin >= 0 && begin < max_batch()) return &Row(begin);
  if (begin == 0 && BucketFor(size) == size && size <= max_batch()) return &ForRows(size);
  auto& view = ranges_[{begin, size}];
  if (view == nullptr) {
    auto made = slots_->Rows(begin, begin + size);
    if (!made.ok()) {
      ranges_.erase({begin, size});
      return made.status();
    }
    view = std::move(*made);
  }
  return view.get();
}

absl::StatusOr<Tensor> DecoderStatePool::Constant(
    const std::string& key, const std::function<absl::StatusOr<Tensor>()>& make) {
  if (constant_.defined() && key == constant_key_) return constant_;
  constant_ = Tensor();
  ASSIGN_OR_RETURN(constant_, make());
  constant_key_ = key;
  return constant_;
}

absl::StatusOr<const DecoderStatePool::ChoiceBuffers*> DecoderStatePool::Choice() {
  if (!choice_.out[1].defined()) {
    ChoiceBuffers made;
    ASSIGN_OR_RETURN(made.mask_index, backend_->Allocate({max_batch()}, DType::kI32));
    for (Tensor& out : made.out) {
      ASSIGN_OR_RETURN(out, backend_->Allocate({max_batch(), 5}, DType::kF32));
    }
    choice_ = std::move(made);
  }
  return &choice_;
}

absl::Status DecoderStatePool::WaitForLeftCopy() {
  if (!left_copy_.has_value()) return absl::OkStatus();
  const uint64_t ticket = *left_copy_;
  left_copy_.reset();
  return backend_->WaitForCopy(ticket);
}

DecoderStatePool::~DecoderStatePool() {
  // The host scratch and the choice buffers must outlive a copy still in flight.
  if (left_copy_.has_value()) (void)backend_->WaitForCopy(*left_copy_);
}

absl::StatusOr<HostBuffer*> DecoderStatePool::HostScratch(size_t bytes) {
  if (host_scratch_.size_bytes() < bytes) {
    RETURN_IF_ERROR(backend_->Synchronize());  // nothing may still be copying into the old one
    host_scratch_ = HostBuffer();
    ASSIGN_OR_RETURN(host_scratch_, backend_->AllocateHost(bytes));
  }
  return &host_scratch_;
}

int DecoderStatePool::BucketFor(int rows) const {
  for (const auto& bucket : buckets_) {
    if (bucket->batch_size() >= rows) return bucket->batch_size();
  }
  return max_batch();
}

DecoderState& DecoderStatePool::ForRows(int rows) {
  for (const auto& bucket : buckets_) {
    if (bucket->batch_size() >= rows) return *bucket;
  }
  return *buckets_.back();
}

}  // namespace waav::whisper
