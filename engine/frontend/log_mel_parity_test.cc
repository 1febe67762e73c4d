// Parity of the log-mel front end with faster-whisper 1.2.1's FeatureExtractor.
//
// The C++ side loads each clip (jfk.wav at 16 kHz; LJ Speech clips at 22.05 kHz, resampled by
// waav's soxr resampler), writes the 16 kHz float samples to a file, and
// tests/reference/logmel_reference.py computes faster-whisper's features from that same file,
// so the only difference left is the front end itself.
//
// Measured (faster-whisper 1.2.1, numpy 2.4.6): filterbank identical to the last bit; max abs
// error 1.2e-5 in normalised log-mel units (jfk 1.1e-5, LJ001-0001 1.2e-5, LJ001-0002 6.1e-6),
// i.e. 4.8e-5 in log10 power, 5e-4 dB. Both sides are float32: against a float64 evaluation of
// the same formula on jfk.wav, faster-whisper is off by 5.9e-6 and waav by 1.2e-5. The bound,
// 1e-4, leaves a margin of 8 for numpy builds whose float32 FFT and log10 round differently.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "engine/audio/resampler.h"
#include "engine/audio/wav_reader.h"
#include "engine/frontend/log_mel.h"
#include "gtest/gtest.h"

namespace waav::frontend {
namespace {

namespace fs = std::filesystem;

constexpr double kMaxAbsError = 1e-4;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

void WriteFloats(const fs::path& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> ReadFloats(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const auto bytes = static_cast<size_t>(in.tellg());
  std::vector<float> v(bytes / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::string name;
  std::vector<float> samples;  // 16 kHz
};

TEST(LogMelParityTest, MatchesFasterWhisperFeatureExtractor) {
  const std::string python = Env("WAAV_PYTHON");
  const std::string shared = Env("WAAV_SHARED_DATA");
  const std::string source = Env("WAAV_SOURCE_DIR");
  if (python.empty() || !fs::exists(python)) {
    GTEST_SKIP() << "WAAV_PYTHON (" << python << ") absent: no faster-whisper reference";
  }
  const fs::path speech = fs::path(shared) / "speech";
  const std::vector<std::string> clips = {"jfk.wav", "ljspeech/LJ001-0001.wav",
                                          "ljspeech/LJ001-0002.wav"};
  for (const std::string& clip : clips) {
    if (shared.empty() || !fs::exists(speech / clip)) {
      GTEST_SKIP() << "WAAV_SHARED_DATA (" << shared << ") lacks speech/" << clip;
    }
  }
  const fs::path script = fs::path(source) / "tests" / "reference" / "logmel_reference.py";
  ASSERT_TRUE(fs::exists(script)) << script << " missing (WAAV_SOURCE_DIR=" << source << ")";

  std::vector<Case> cases;
  for (const std::string& clip : clips) {
    absl::StatusOr<audio::Audio> audio = audio::LoadAudio16k((speech / clip).string());
    ASSERT_TRUE(audio.ok()) << audio.status();
    cases.push_back({clip, std::move(audio->samples)});
  }
  // jfk zero-padded to a full 30 s window: 19 s of exact silence exercise the clamp floor.
  Case padded{"jfk.wav padded to 30 s", cases[0].samples};
  padded.samples.resize(480000, 0.0f);
  cases.push_back(std::move(padded));
  // Shorter than half a window: numpy reflects more than once. Deterministic, unlike noise:
  // noise can leave a narrow mel bin nearly empty, where float rounding on both sides is large
  // relative to the bin (log_mel_test covers that against a double reference).
  Case tiny{"37 samples of two tones", std::vector<float>(37)};
  for (size_t i = 0; i < tiny.samples.size(); ++i) {
    tiny.samples[i] = static_cast<float>(0.3 * std::sin(2 * std::numbers::pi * 440 * i / 16000) +
                                         0.1 * std::sin(2 * std::numbers::pi * 3000 * i / 16000));
  }
  cases.push_back(std::move(tiny));

  const fs::path dir =
      fs::temp_directory_path() / ("waav_logmel_parity_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string command = "'" + python + "' '" + script.string() + "' --filters '" +
                        (dir / "filters.f32").string() + "'";
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path in = dir / ("in" + std::to_string(i) + ".f32");
    WriteFloats(in, cases[i].samples);
    command +=
        " '" + in.string() + "' '" + (dir / ("out" + std::to_string(i) + ".f32")).string() + "'";
  }
  const fs::path log = dir / "log.txt";
  command += " > '" + log.string() + "' 2>&1";
  const int rc = std::system(command.c_str());
  ASSERT_EQ(rc, 0) << "reference failed: " << command << "\n" << ReadText(log);

  const LogMel log_mel;
  const std::vector<float> filters = ReadFloats(dir / "filters.f32");
  ASSERT_EQ(filters.size(), log_mel.mel_filters().size());
  double filter_error = 0;
  for (size_t i = 0; i < filters.size(); ++i) {
    filter_error = std::max(filter_error, std::abs(double{filters[i]} - log_mel.mel_filters()[i]));
  }
  EXPECT_LE(filter_error, 1e-9) << "filterbank differs from faster-whisper's";
  std::printf("filterbank max abs difference: %.3g\n", filter_error);

  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    const LogMel::Features ours = log_mel.Compute(cases[i].samples);
    const std::vector<float> theirs = ReadFloats(dir / ("out" + std::to_string(i) + ".f32"));
    ASSERT_EQ(theirs.size(), ours.data.size())
        << "faster-whisper gave " << theirs.size() / 80 << " frames, waav " << ours.n_frames;
    double worst = 0;
    size_t worst_index = 0;
    for (size_t j = 0; j < theirs.size(); ++j) {
      const double error = std::abs(double{theirs[j]} - ours.data[j]);
      if (error > worst) {
        worst = error;
        worst_index = j;
      }
    }
    std::printf(
        "%-26s %5d frames  max abs error %.3g (mel %zu, frame %zu: ours %.7f, theirs %.7f)\n",
        cases[i].name.c_str(), ours.n_frames, worst, worst_index / ours.n_frames,
        worst_index % ours.n_frames, ours.data[worst_index], theirs[worst_index]);
    EXPECT_LE(worst, kMaxAbsError);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace waav::frontend
