// The Whisper decoder step built from the CUDA backend's fused kernels (CudaExtensions): 34
// launches instead of WhisperModel::DecodeStep's 75 (LayerNorm folded into the projections, the
// residual adds into the output projections, the K/V cache appends into the QKV projection).
// An experiment for the GPU benchmark: it reads the weights from the model file itself and uses a
// WhisperModel's DecoderState (caches, step inputs, logits), so both steps run on the same state.
// fused_whisper_step_test checks it against WhisperModel::DecodeStep.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace waav::ct2 {
class ModelFile;
}

namespace waav::bench {

// A whole CTranslate2 variable (f16 or f32 in the file) as a new tensor of `dtype` on `backend`.
absl::StatusOr<Tensor> LoadVariable(Backend& backend, const ct2::ModelFile& file,
                                    const std::string& name, DType dtype);

// The decoder weights of a Whisper model file as the bench steps (fused, persistent) use them:
// f16 projections and token embedding, f32 biases, LayerNorms and position table.
struct WhisperDecoderWeights {
  struct Layer {
    Tensor ln1_g, ln1_b, qkv_w, qkv_b, out_w, out_b;  // self-attention (qkv_w [3d, d])
    Tensor ln2_g, ln2_b, cq_w, cq_b, cout_w, cout_b;  // cross-attention
    Tensor ln3_g, ln3_b, ff1_w, ff1_b, ff2_w, ff2_b;  // FFN
  };
  int n_heads = 0;
  Tensor token_embedding, positions, final_g, final_b;
  std::vector<Layer> layers;
};
// Reads `model_dir`/model.bin's decoder onto `backend` (synchronised before returning).
absl::StatusOr<WhisperDecoderWeights> LoadWhisperDecoderWeights(const std::string& model_dir,
                                                                Backend& backend);

class FusedWhisperDecoder {
 public:
  // Loads the decoder weights of `model_dir`/model.bin (f16 projections and embedding) onto
  // `backend`, which must be a CUDA backend and outlive this object.
  static absl::StatusOr<std::unique_ptr<FusedWhisperDecoder>> Load(const std::string& model_dir,
                                                                   Backend& backend);

  // Allocates the step's activations for `state`'s batch size; call before capturing Step().
  absl::Status Prepare(const whisper::DecoderState& state);
  // One decoder step with WhisperModel::DecodeStep's inputs and outputs (step_tokens, positions,
  // lengths -> step_logits, caches appended). Capturable.
  absl::Status Step(const whisper::DecoderState& state);

 private:
  FusedWhisperDecoder(Backend& backend, CudaExtensions& ext, WhisperDecoderWeights weights)
      : backend_(backend), ext_(ext), w_(std::move(weights)) {}

  Backend& backend_;
  CudaExtensions& ext_;
  WhisperDecoderWeights w_;
  int d_model_ = 0;
  int batch_ = 0;
  Tensor x_, q_, attended_, hidden_;
};

}  // namespace waav::bench
