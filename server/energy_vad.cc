#include "server/energy_vad.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "absl/strings/str_cat.h"

namespace waav::server {
namespace {

constexpr double kSilenceDb = -100.0;   // level of digital silence (log of 0 clamped)
constexpr int kFloorWindowFrames = 94;  // 3 s of 32 ms frames
constexpr double kMinSpeechDb = -55.0;  // quieter than this is never speech
constexpr double kMinSnrDb = 10.0;      // speech stands this far above the noise floor
constexpr double kNoiseZcr = 0.35;      // zero-crossing rate above which a frame sounds like noise

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

class EnergyState final : public streaming::VadStreamState {
 public:
  // The lowest level in the window, kept as a monotonic deque (O(1) amortised per frame).
  double PushLevel(double level_db) {
    ++frame_;
    while (!minima_.empty() && minima_.back().level_db >= level_db) minima_.pop_back();
    minima_.push_back({frame_, level_db});
    while (minima_.front().frame <= frame_ - kFloorWindowFrames) minima_.pop_front();
    return minima_.front().level_db;
  }

 private:
  struct Entry {
    int64_t frame;
    double level_db;
  };
  int64_t frame_ = 0;
  std::deque<Entry> minima_;
};

}  // namespace

std::unique_ptr<streaming::VadStreamState> EnergyVad::NewState() const {
  return std::make_unique<EnergyState>();
}

absl::Status EnergyVad::Process(absl::Span<const float> frames,
                                absl::Span<streaming::VadStreamState* const> states,
                                absl::Span<float> probabilities) {
  const size_t batch = states.size();
  if (frames.size() != batch * kFrameSamples || probabilities.size() != batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EnergyVad::Process: ", frames.size(), " samples and ", probabilities.size(),
        " outputs for ", batch, " streams; want ", kFrameSamples, " samples and 1 output each"));
  }
  for (size_t b = 0; b < batch; ++b) {
    auto* state = dynamic_cast<EnergyState*>(states[b]);
    if (state == nullptr) {
      return absl::InvalidArgumentError("EnergyVad::Process: a state not made by this model");
    }
    const float* x = frames.data() + b * kFrameSamples;
    double energy = 0;
    int crossings = 0;
    for (int i = 0; i < kFrameSamples; ++i) {
      energy += static_cast<double>(x[i]) * x[i];
      if (i > 0 && (x[i] >= 0) != (x[i - 1] >= 0)) ++crossings;
    }
    const double rms = std::sqrt(energy / kFrameSamples);
    const double level_db = rms > 0 ? std::max(kSilenceDb, 20.0 * std::log10(rms)) : kSilenceDb;
    const double floor_db = state->PushLevel(level_db);
    const double zcr = static_cast<double>(crossings) / (kFrameSamples - 1);
    const double loud = Sigmoid((level_db - kMinSpeechDb) / 3.0);
    const double above_floor = Sigmoid((level_db - floor_db - kMinSnrDb) / 2.5);
    const double tonal = Sigmoid((kNoiseZcr - zcr) / 0.03);
    probabilities[b] = static_cast<float>(loud * above_floor * tonal);
  }
  return absl::OkStatus();
}

}  // namespace waav::server
