// Silero VAD as the streaming engine's voice-activity model.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/models/vad/silero_vad.h"
#include "engine/streaming/voice_activity.h"

namespace waav::streaming {

class SileroVoiceActivity : public VoiceActivityModel {
 public:
  // Loads `onnx_path` (models/silero-vad/silero_vad_16k_op15.onnx) onto `backend`, which must
  // outlive the model.
  static absl::StatusOr<std::unique_ptr<SileroVoiceActivity>> Load(const std::string& onnx_path,
                                                                   Backend& backend);

  int frame_samples() const override { return vad::kVadFrameSamples; }
  std::unique_ptr<VadStreamState> NewState() const override;
  absl::Status Process(absl::Span<const float> frames, absl::Span<VadStreamState* const> states,
                       absl::Span<float> probabilities) override;

 private:
  explicit SileroVoiceActivity(std::unique_ptr<vad::SileroVad> model) : model_(std::move(model)) {}
  std::unique_ptr<vad::SileroVad> model_;
};

}  // namespace waav::streaming
