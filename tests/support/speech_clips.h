// Test helper: clips of the shared speech data ($WAAV_SHARED_DATA/speech, ../shared/data) at
// 16 kHz, for the tests that run the real model on real speech.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace waav::testing {

// The clips `names` (paths under speech/) at 16 kHz mono, in order. NotFoundError naming the
// first one absent, so that a test skips on it:
//   if (absl::IsNotFound(clips.status())) GTEST_SKIP() << clips.status().message();
// InternalError naming a clip that is there but does not load.
absl::StatusOr<std::vector<std::vector<float>>> LoadSpeechClips(
    const std::vector<std::string>& names);

}  // namespace waav::testing
