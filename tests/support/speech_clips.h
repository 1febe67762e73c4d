// Test helper: clips of the shared speech data ($WAAV_SHARED_DATA/speech, ../shared/data) at
// 16 kHz, for the tests that run the real model on real speech.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/frontend/log_mel.h"

namespace waav::testing {

// The clips `names` (paths under speech/) at 16 kHz mono, in order. NotFoundError naming the
// first one absent, so that a test skips on it:
//   if (absl::IsNotFound(clips.status())) GTEST_SKIP() << clips.status().message();
// InternalError naming a clip that is there but does not load.
absl::StatusOr<std::vector<std::vector<float>>> LoadSpeechClips(
    const std::vector<std::string>& names);

// One window of `samples` ([n_mels, n_frames]) as the streaming engine builds it: the log-mel
// frames of the audio (all but the front end's last, at most n_frames), then zeros.
std::vector<float> MelWindow(const frontend::LogMel& log_mel, absl::Span<const float> samples,
                             int n_frames);

}  // namespace waav::testing
