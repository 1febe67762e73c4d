#include "tests/support/speech_clips.h"

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

}  // namespace waav::testing
