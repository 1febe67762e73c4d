// The voice-activity model the frontend worker runs on every frame of every stream. Silero VAD
// implements it (engine/models/vad); tests may use a fake.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace waav::streaming {

// Per-stream recurrent state, owned by the stream.
class VadStreamState {
 public:
  virtual ~VadStreamState() = default;
};

class VoiceActivityModel {
 public:
  virtual ~VoiceActivityModel() = default;
  // Samples per frame at 16 kHz (512 for Silero).
  virtual int frame_samples() const = 0;
  virtual std::unique_ptr<VadStreamState> NewState() const = 0;
  // One frame for each of B streams: frames is B × frame_samples(), states and probabilities B.
  virtual absl::Status Process(absl::Span<const float> frames,
                               absl::Span<VadStreamState* const> states,
                               absl::Span<float> probabilities) = 0;
};

}  // namespace waav::streaming
