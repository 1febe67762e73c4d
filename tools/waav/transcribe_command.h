// `waav transcribe FILE...`: offline transcription of audio files on a local backend.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace waav::cli {

struct TranscribeArgs {
  std::vector<std::string> files;
  std::string model_dir;         // folder with model.bin and tokenizer.json
  std::string backend = "cpu";   // --backend
  int threads = 0;               // 0: all cores
  int gpu_device = 0;            // --gpu-device: the GPU's ordinal (cuda, hip, auto)
  bool json = false;             // one JSON object per file and line
  bool word_timestamps = false;  // words with times in the JSON segments
  bool verbose = false;          // timings on stderr
};

// Registers `transcribe` with its options on `app`; the values land in `*args` (whose
// model_dir, set before, is the default shown).
CLI::App* AddTranscribeCommand(CLI::App& app, TranscribeArgs* args);

// Returns the process exit code: 0 when every file was transcribed, 1 otherwise (each failure
// is one line on stderr), 2 when the model or backend cannot start.
int RunTranscribe(const TranscribeArgs& args);

// JSON string literal of `text` (quotes included), escaping per RFC 8259.
std::string JsonString(const std::string& text);

}  // namespace waav::cli
