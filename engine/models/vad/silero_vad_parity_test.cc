// Parity of waav's SileroVad (CPU backend) with onnxruntime running the same ONNX file.
//
// The C++ side loads each clip (jfk.wav at 16 kHz; LJ Speech clips at 22.05 kHz, resampled by
// waav's LoadAudio16k), adds generated silence and white noise, writes the 16 kHz samples to
// files, and tests/reference/vad_reference.py runs onnxruntime on those same samples frame by
// frame with state, as silero-vad's OnnxWrapper does. Both the batched-over-time path
// (ProcessSequence) and the streaming path (Process, one frame per call) are compared with it,
// per frame, on silero_vad_16k_op15.onnx (the file waav loads) and on silero_vad.onnx (two-rate
// export, weights in If branches).
//
// Measured (onnxruntime 1.31.1, numpy 2.4.6): max abs error 7.9e-6 with ProcessSequence and
// 3.4e-6 with Process on jfk.wav (frame 341, p = 0.51, where the sigmoid is steepest), 1.3e-6 or
// less on the LJ Speech clips, ~3e-7 on silence and noise; the same on both files. Against a
// float64 evaluation of the graph (docs/vad.md), onnxruntime is within 1.5e-6, Process 2.4e-6,
// ProcessSequence 8.9e-6 (its batched front end goes through OpenBLAS sgemm, which sums each
// output's products serially).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/audio/resampler.h"
#include "engine/models/vad/silero_vad.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/test_env.h"

namespace waav::vad {
namespace {

namespace fs = std::filesystem;

// Largest |p_waav − p_onnxruntime| allowed on any frame: 2.3 times the worst measured. Both sides
// compute in float32 and differ in summation order and in their exp/tanh/sqrt.
constexpr double kMaxAbsError = 2e-5;

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Clip {
  std::string name;
  std::vector<float> samples;  // 16 kHz
};

TEST(SileroVadParityTest, MatchesOnnxRuntimeFrameByFrame) {
  auto dir = testing::SileroVadDir();
  if (!dir) GTEST_SKIP() << "models/silero-vad absent (run scripts/fetch_vad)";
  auto python = testing::PythonWith("numpy, onnxruntime");
  if (!python) GTEST_SKIP() << "WAAV_PYTHON absent or lacks numpy/onnxruntime: no reference";
  const fs::path script =
      fs::path(testing::SourceDir()) / "tests" / "reference" / "vad_reference.py";
  ASSERT_TRUE(fs::exists(script)) << script;

  std::vector<Clip> clips;
  for (const std::string name : {"jfk.wav", "ljspeech/LJ001-0001.wav", "ljspeech/LJ001-0002.wav",
                                 "ljspeech/LJ001-0003.wav"}) {
    auto path = testing::SpeechFile(name);
    if (!path) {
      std::printf("skipping %s: not in WAAV_SHARED_DATA\n", name.c_str());
      continue;
    }
    absl::StatusOr<audio::Audio> audio = audio::LoadAudio16k(*path);
    ASSERT_TRUE(audio.ok()) << audio.status();
    clips.push_back({name, std::move(audio->samples)});
  }
  clips.push_back({"silence 5 s", std::vector<float>(80000, 0.0f)});
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  Clip white{"white noise 5 s (sigma 0.1)", std::vector<float>(80000)};
  for (float& v : white.samples) v = noise(rng);
  clips.push_back(std::move(white));
  if (!clips.empty() && clips[0].name == "jfk.wav") {
    // Speech, then silence, then quiet noise: the state must fall back after speech ends.
    Clip mixed{"jfk + silence + quiet noise", clips[0].samples};
    mixed.samples.resize(mixed.samples.size() + 32000, 0.0f);
    for (int i = 0; i < 32000; ++i) mixed.samples.push_back(0.01f * noise(rng));
    clips.push_back(std::move(mixed));
  }

  const fs::path tmp = testing::MakeTempDir("waav-vad-parity");
  for (size_t i = 0; i < clips.size(); ++i) {
    testing::WriteRaw(tmp / ("in" + std::to_string(i) + ".f32"), clips[i].samples);
  }
  std::unique_ptr<Backend> backend = CreateCpuBackend({.num_threads = 2});
  for (const std::string model_file : {"silero_vad_16k_op15.onnx", "silero_vad.onnx"}) {
    SCOPED_TRACE(model_file);
    const std::string model_path = *dir + "/" + model_file;
    std::string command =
        "'" + *python + "' '" + script.string() + "' --model '" + model_path + "'";
    for (size_t i = 0; i < clips.size(); ++i) {
      command += " '" + (tmp / ("in" + std::to_string(i) + ".f32")).string() + "' '" +
                 (tmp / ("out" + std::to_string(i) + ".f32")).string() + "'";
    }
    const fs::path log = tmp / "log.txt";
    command += " > '" + log.string() + "' 2>&1";
    ASSERT_EQ(testing::RunCommand(command), 0) << command << "\n" << ReadText(log);

    auto vad = SileroVad::Load(model_path, *backend);
    ASSERT_TRUE(vad.ok()) << vad.status();
    std::printf("%s (noise seed %u):\n", model_file.c_str(), seed);
    for (size_t i = 0; i < clips.size(); ++i) {
      SCOPED_TRACE(clips[i].name);
      const std::vector<float> want =
          testing::ReadRaw<float>(tmp / ("out" + std::to_string(i) + ".f32"));
      const size_t frames = clips[i].samples.size() / kVadFrameSamples;
      ASSERT_EQ(want.size(), frames);
      absl::Span<const float> whole(clips[i].samples.data(), frames * kVadFrameSamples);

      VadState sequence_state;
      auto sequence = (*vad)->ProcessSequence(whole, sequence_state);
      ASSERT_TRUE(sequence.ok()) << sequence.status();
      std::vector<float> streamed;
      VadState stream_state;
      VadState* states[] = {&stream_state};
      for (size_t f = 0; f < frames; ++f) {
        auto p = (*vad)->Process(whole.subspan(f * kVadFrameSamples, kVadFrameSamples), states);
        ASSERT_TRUE(p.ok()) << p.status();
        streamed.push_back((*p)[0]);
      }
      double worst_sequence = 0, worst_stream = 0;
      size_t worst_frame = 0;
      for (size_t f = 0; f < frames; ++f) {
        const double e_seq = std::abs(double{(*sequence)[f]} - want[f]);
        worst_stream = std::max(worst_stream, std::abs(double{streamed[f]} - want[f]));
        if (e_seq > worst_sequence) {
          worst_sequence = e_seq;
          worst_frame = f;
        }
      }
      const size_t speech = static_cast<size_t>(
          std::count_if(want.begin(), want.end(), [](float p) { return p > 0.5f; }));
      std::printf(
          "  %-30s %4zu frames (%4zu > 0.5)  max abs error: sequence %.2g (frame %zu: %.7f vs "
          "%.7f), streamed %.2g\n",
          clips[i].name.c_str(), frames, speech, worst_sequence, worst_frame,
          (*sequence)[worst_frame], want[worst_frame], worst_stream);
      EXPECT_LE(worst_sequence, kMaxAbsError);
      EXPECT_LE(worst_stream, kMaxAbsError);
    }
  }
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace waav::vad
