// The files of a faster-whisper (CTranslate2) Whisper model folder besides model.bin:
// config.json, which holds the decoding constants the converter took from the HF model.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace waav::ct2 {

struct WhisperConfig {
  // Token ids never to sample (HF generation_config "suppress_tokens"). Default: empty.
  std::vector<int> suppress_ids;
  // Token ids not to sample as the first token of a segment (blank, <|endoftext|>).
  // Default: empty.
  std::vector<int> suppress_ids_begin;
  // Ids of the language tokens <|en|>, <|zh|>, ... in the model's order. Default: empty.
  std::vector<int> lang_ids;
  // (decoder layer, head) pairs whose cross-attention gives word timings. Default: empty.
  std::vector<std::pair<int, int>> alignment_heads;
};

// Paths of the files in a model folder; model.bin is required, the others reported if present
// (empty string when absent).
struct WhisperModelFiles {
  std::string model_bin;
  std::string config_json;
  std::string tokenizer_json;
};

// Reads config.json. Every field is optional (CTranslate2 falls back to empty lists too), but a
// field that is present must have the right type: a list of non-negative integers, and for
// alignment_heads a list of [layer, head] pairs. Unknown keys are ignored. Errors name the file
// and the field.
absl::StatusOr<WhisperConfig> LoadWhisperConfig(const std::string& path);

// Finds the files in `dir`. NotFound when the folder or its model.bin is missing.
absl::StatusOr<WhisperModelFiles> FindWhisperModelFiles(const std::string& dir);

}  // namespace waav::ct2
