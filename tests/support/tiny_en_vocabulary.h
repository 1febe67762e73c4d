// Test helper: Whisper tiny.en's vocabulary (its tokenizer.json under $WAAV_MODELS_DIR), for the
// tests of text and decoding rules that need real tokens but no weights.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/models/whisper/vocabulary.h"

namespace waav::testing {

// NotFoundError when the model folder is absent, so that a test skips on it:
//   if (absl::IsNotFound(v.status())) GTEST_SKIP() << v.status().message();
// Another error when its tokenizer does not load.
absl::StatusOr<std::unique_ptr<whisper::Vocabulary>> LoadTinyEnVocabulary();

}  // namespace waav::testing
