// EnergyVad: a FALLBACK voice-activity model for waavd, used only until Silero VAD
// (engine/models/vad) is merged; CreateVad() in server/vad_factory.h is the one place that
// chooses, and will return Silero then. It is not a neural VAD and does not pretend to be.
//
// Per 32 ms frame (512 samples at 16 kHz) it computes the frame's level (RMS in dBFS), its
// zero-crossing rate, and a per-stream noise floor (the lowest level of the last 3 s), and turns
// them into a speech "probability" that is high only when the frame is
//   * loud in absolute terms (above about -55 dBFS),
//   * well above the recent noise floor (about 10 dB), so stationary noise of any level is
//     learned as background within seconds, and
//   * not noise-like in its zero-crossing rate (white noise crosses zero on about half of its
//     samples; voiced speech far less often).
// Good enough for clean speech, silence and steady noise (what the integration tests use);
// babble, music or non-stationary noise will fool it.
#pragma once

#include <memory>

#include "engine/streaming/voice_activity.h"

namespace waav::server {

class EnergyVad final : public streaming::VoiceActivityModel {
 public:
  static constexpr int kFrameSamples = 512;

  int frame_samples() const override { return kFrameSamples; }
  std::unique_ptr<streaming::VadStreamState> NewState() const override;
  absl::Status Process(absl::Span<const float> frames,
                       absl::Span<streaming::VadStreamState* const> states,
                       absl::Span<float> probabilities) override;
};

}  // namespace waav::server
