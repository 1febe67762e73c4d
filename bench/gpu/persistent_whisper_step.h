// The Whisper decoder step as one persistent kernel (kernels/cuda/persistent_decoder.cuh): a
// single cooperative launch per step for up to 8 rows of Whisper tiny (d_model 384, 6 heads,
// FFN 1536, <= 4 layers), with the greedy token, its log-probability and the log-sum-exp reduced
// on the device. The step itself is the CUDA backend's (kernels/cuda/persistent_step.h, what
// WhisperModel::DecodeStep runs through Backend::PrepareDecoderStep); this wrapper adds what the
// benchmark measures beyond the engine's use: the kernel's knobs, f16 copies of the cross K/V
// and the on-device greedy outputs. Like FusedWhisperDecoder it reads the weights from the model
// file and works on a WhisperModel's DecoderState (inputs, self caches, cross K/V, logits), so
// both steps can run on the same state; persistent_whisper_step_test checks it against the CPU
// backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "bench/gpu/fused_whisper_step.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/persistent_step.h"

namespace waav::bench {

struct PersistentStepOptions {
  // Attend over f16 copies of the cross-attention K/V (RefreshCross() makes them from the
  // state's f32 caches): half the bytes of the largest read of a step. Default: true.
  bool f16_cross = true;
  // Also write the raw logits into state.step_logits(). Default: true.
  bool write_logits = true;
  // The kernel's knobs (kernels/cuda/persistent_step.h).
  cuda::PersistentStepTuning tuning;
};

class PersistentWhisperDecoder {
 public:
  static constexpr int kMaxBatch = 8;

  // Loads the decoder weights of `model_dir`/model.bin onto `backend` (a CUDA backend that must
  // outlive this object). Unimplemented for models other than Whisper tiny's decoder shapes.
  static absl::StatusOr<std::unique_ptr<PersistentWhisperDecoder>> Load(
      const std::string& model_dir, Backend& backend);

  // Allocates the workspace and outputs for `state`'s batch (1 ..= kMaxBatch); call before
  // capturing Step() or RefreshCross(). Not while capturing.
  absl::Status Prepare(const whisper::DecoderState& state, const PersistentStepOptions& options);
  // f16 copies of the state's cross K/V (with f16_cross): after every encoder pass into `state`.
  // Capturable.
  absl::Status RefreshCross(const whisper::DecoderState& state);
  // Tokens that the greedy choice and the log-sum-exp skip (the logits keep them). Replaces the
  // previous set; empty: none. Not while capturing.
  absl::Status SetSuppressedTokens(absl::Span<const int32_t> tokens);
  // One decoder step with WhisperModel::DecodeStep's inputs (step_tokens, positions, lengths),
  // K/V appended to the self caches, logits into step_logits (with write_logits), and the
  // outputs below. One kernel launch; capturable.
  absl::Status Step(const whisper::DecoderState& state);

  // i32 [B]: argmax of each row's logits over the tokens not suppressed (lowest id on ties).
  const Tensor& best_token() const { return best_token_; }
  // f32 [B]: its log-softmax value; f32 [B]: log Σ exp over the tokens not suppressed.
  const Tensor& best_logprob() const { return best_logprob_; }
  const Tensor& logsumexp() const { return logsumexp_; }
  // Whether Step() runs the cluster step (kernels/cuda/cluster_decoder.cuh) for the prepared
  // batch and options; false before Prepare().
  // The cluster step's timeline after a step with profile_mode kProfileTimeline.
  absl::StatusOr<std::vector<int64_t>> ReadTimeline() {
    if (step_ == nullptr) return absl::FailedPreconditionError("ReadTimeline before Prepare");
    return step_->ReadTimeline();
  }
  bool UsesClusterStep() const {
    return step_ != nullptr && step_->UsesClusterStep(batch_, options_.f16_cross);
  }

 private:
  PersistentWhisperDecoder(Backend& backend, CudaExtensions& ext, WhisperDecoderWeights weights)
      : backend_(backend), ext_(ext), w_(std::move(weights)) {}

  Backend& backend_;
  CudaExtensions& ext_;
  WhisperDecoderWeights w_;
  DecoderStepWeights step_weights_;  // views of w_ (Q, K, V as rows of qkv_w)
  // Per batch (Prepare).
  int batch_ = 0;
  PersistentStepOptions options_;
  std::unique_ptr<cuda::PersistentDecoderStep> step_;
  Tensor suppress_bits_, best_token_, best_logprob_, logsumexp_;
  std::vector<Tensor> cross_k16_, cross_v16_;
};

}  // namespace waav::bench
