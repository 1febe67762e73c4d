#include "tests/support/test_env.h"

#include <unistd.h>

#include <cstdlib>
#include <random>

namespace waav::testing {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

std::optional<std::string> TinyEnModelDir() {
  const std::string dir = Env("WAAV_MODELS_DIR") + "/whisper-tiny.en";
  if (Env("WAAV_MODELS_DIR").empty() || !std::filesystem::exists(dir + "/model.bin")) {
    return std::nullopt;
  }
  return dir;
}

std::optional<std::string> SileroVadDir() {
  const std::string dir = Env("WAAV_MODELS_DIR") + "/silero-vad";
  if (Env("WAAV_MODELS_DIR").empty() ||
      !std::filesystem::exists(dir + "/silero_vad_16k_op15.onnx")) {
    return std::nullopt;
  }
  return dir;
}

std::optional<std::string> SpeechFile(const std::string& name) {
  const std::string path = Env("WAAV_SHARED_DATA") + "/speech/" + name;
  if (Env("WAAV_SHARED_DATA").empty() || !std::filesystem::exists(path)) return std::nullopt;
  return path;
}

std::optional<std::string> ReferencePython() {
  const std::string python = Env("WAAV_PYTHON");
  if (python.empty() || !std::filesystem::exists(python)) return std::nullopt;
  if (RunCommand(python + " -c 'import faster_whisper' >/dev/null 2>&1") != 0) return std::nullopt;
  return python;
}

std::optional<std::string> PythonWith(const std::string& modules) {
  const std::string python = Env("WAAV_PYTHON");
  if (python.empty() || !std::filesystem::exists(python)) return std::nullopt;
  if (RunCommand(python + " -c 'import " + modules + "' >/dev/null 2>&1") != 0) return std::nullopt;
  return python;
}

std::optional<std::string> FindProgram(const std::string& name) {
  const std::string path = Env("PATH");
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::filesystem::path candidate =
        std::filesystem::path(path.substr(begin, end - begin)) / name;
    if (end > begin && access(candidate.c_str(), X_OK) == 0) return candidate.string();
    begin = end + 1;
  }
  return std::nullopt;
}

std::string SourceDir() { return Env("WAAV_SOURCE_DIR"); }

std::filesystem::path MakeTempDir(const std::string& prefix) {
  std::random_device rd;
  const auto dir = std::filesystem::temp_directory_path() /
                   (prefix + "-" + std::to_string(rd()) + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  return dir;
}

int RunCommand(const std::string& command) { return std::system(command.c_str()); }

}  // namespace waav::testing
