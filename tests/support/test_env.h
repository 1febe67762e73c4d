// Test helpers: where the models, shared data and Python references are, and skipping with a
// printed reason when one is absent. The test environment (set by cmake/WaavHelpers.cmake) is
// read here and nowhere else in the tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace waav::testing {

// $WAAV_MODELS_DIR/whisper-tiny.en, or nullopt when model.bin is not there.
std::optional<std::string> TinyEnModelDir();
// $WAAV_MODELS_DIR/silero-vad (scripts/fetch_vad), or nullopt when its 16 kHz model is absent.
std::optional<std::string> SileroVadDir();
// $WAAV_SHARED_DATA/speech/NAME, or nullopt when absent.
std::optional<std::string> SpeechFile(const std::string& name);
// $WAAV_PYTHON when it exists and can import the references (faster_whisper), else nullopt.
std::optional<std::string> ReferencePython();
// $WAAV_PYTHON when it exists and can import `modules` (comma-separated, e.g. "numpy,
// onnxruntime"), else nullopt.
std::optional<std::string> PythonWith(const std::string& modules);
// The absolute path of executable `name` found on $PATH, or nullopt.
std::optional<std::string> FindProgram(const std::string& name);
// $WAAV_SOURCE_DIR.
std::string SourceDir();
// A fresh empty directory under the system temp dir, removed by the caller if wanted.
std::filesystem::path MakeTempDir(const std::string& prefix);
// Runs a shell command; returns its exit status (0 = success).
int RunCommand(const std::string& command);

template <typename T>
std::vector<T> ReadRaw(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<T> values(bytes.size() / sizeof(T));
  std::copy(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(values.size() * sizeof(T)),
            reinterpret_cast<char*>(values.data()));
  return values;
}

template <typename T>
void WriteRaw(const std::filesystem::path& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(T)));
}

}  // namespace waav::testing
