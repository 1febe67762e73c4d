#include "tests/support/tiny_en_vocabulary.h"

#include <utility>

#include "engine/text/bpe_tokenizer.h"
#include "tests/support/test_env.h"

namespace waav::testing {

absl::StatusOr<std::unique_ptr<whisper::Vocabulary>> LoadTinyEnVocabulary() {
  const auto model = TinyEnModelDir();
  if (!model) {
    return absl::NotFoundError("models/whisper-tiny.en absent (its tokenizer is needed): run "
                               "scripts/setup");
  }
  auto tokenizer = text::BpeTokenizer::FromTokenizerJson(*model + "/tokenizer.json");
  if (!tokenizer.ok()) return tokenizer.status();
  auto vocabulary = whisper::Vocabulary::Create(std::move(*tokenizer), 51864);
  if (!vocabulary.ok()) return vocabulary.status();
  return std::make_unique<whisper::Vocabulary>(std::move(*vocabulary));
}

}  // namespace waav::testing
