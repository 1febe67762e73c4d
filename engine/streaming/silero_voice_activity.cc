#include "engine/streaming/silero_voice_activity.h"

#include <vector>

#include "engine/runtime/status.h"

namespace waav::streaming {
namespace {

struct SileroStreamState : VadStreamState {
  vad::VadState state;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SileroVoiceActivity>> SileroVoiceActivity::Load(
    const std::string& onnx_path, Backend& backend) {
  ASSIGN_OR_RETURN(auto model, vad::SileroVad::Load(onnx_path, backend));
  return std::unique_ptr<SileroVoiceActivity>(new SileroVoiceActivity(std::move(model)));
}

std::unique_ptr<VadStreamState> SileroVoiceActivity::NewState() const {
  return std::make_unique<SileroStreamState>();
}

absl::Status SileroVoiceActivity::Process(absl::Span<const float> frames,
                                          absl::Span<VadStreamState* const> states,
                                          absl::Span<float> probabilities) {
  if (probabilities.size() != states.size()) {
    return absl::InvalidArgumentError("one probability per stream state is needed");
  }
  std::vector<vad::VadState*> silero_states;
  silero_states.reserve(states.size());
  for (VadStreamState* s : states) {
    auto* silero = dynamic_cast<SileroStreamState*>(s);
    if (silero == nullptr) {
      return absl::InvalidArgumentError("VAD state was not created by this model");
    }
    silero_states.push_back(&silero->state);
  }
  ASSIGN_OR_RETURN(std::vector<float> p, model_->Process(frames, silero_states));
  std::copy(p.begin(), p.end(), probabilities.begin());
  return absl::OkStatus();
}

}  // namespace waav::streaming
