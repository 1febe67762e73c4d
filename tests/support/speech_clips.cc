#include "tests/support/speech_clips.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/audio/resampler.h"
#include "tests/support/test_env.h"

namespace waav::testing {

absl::StatusOr<std::vector<std::vector<float>>> LoadSpeechClips(
    const std::vector<std::string>& names) {
  std::vector<std::vector<float>> clips;
  clips.reserve(names.size());
  for (const std::string& name : names) {
    const auto path = SpeechFile(name);
    if (!path) {
      return absl::NotFoundError(
          absl::StrCat("shared speech data absent ($WAAV_SHARED_DATA/speech/", name, ")"));
    }
    auto audio = audio::LoadAudio16k(*path);
    // (Not NotFound, whatever the loader said: the file is there, and a test must not skip.)
    if (!audio.ok()) return absl::InternalError(absl::StrCat(name, ": ", audio.status().message()));
    clips.push_back(std::move(audio->samples));
  }
  return clips;
}

std::vector<float> MelWindow(const frontend::LogMel& log_mel, absl::Span<const float> samples,
                             int n_frames) {
  const frontend::LogMel::Features f = log_mel.Compute(samples);
  const int frames = std::min(n_frames, f.n_frames - 1);
  std::vector<float> window(static_cast<size_t>(f.n_mels) * n_frames, 0.0f);
  for (int m = 0; m < f.n_mels; ++m) {
    std::copy(f.data.begin() + static_cast<std::ptrdiff_t>(m) * f.n_frames,
              f.data.begin() + static_cast<std::ptrdiff_t>(m) * f.n_frames + frames,
              window.begin() + static_cast<std::ptrdiff_t>(m) * n_frames);
  }
  return window;
}

}  // namespace waav::testing
