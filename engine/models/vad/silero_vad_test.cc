// Tests of SileroVad on the CPU backend: state handling and batching (on the real model when
// scripts/fetch_vad has run, else on a synthetic model of the same shapes with random weights),
// what the real model says about silence, noise and speech, input validation, and loading
// damaged or mismatched files. Parity with onnxruntime is silero_vad_parity_test.cc.
#include "engine/models/vad/silero_vad.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/audio/resampler.h"
#include "engine/models/vad/onnx.pb.h"
#include "engine/models/vad/onnx_constants.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/kernel_test_util.h"
#include "tests/support/test_env.h"

namespace waav::vad {
namespace {

namespace fs = std::filesystem;

// Two computations of the same probabilities that differ only in GEMM blocking (batched vs
// one row, sequence vs streamed) agree to float rounding carried through the LSTM. Seen: up to
// 2.06e-5 (once, on random signals); a real mistake (a wrong row, a lost state) moves
// probabilities by 1e-2 and more, so 1e-4 leaves room for rounding without hiding one.
constexpr double kPathTolerance = 1e-4;

bool Contains(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Shapes of the 16 kHz weights, named as in silero_vad_16k_op15.onnx without "model.".
const std::vector<std::pair<std::string, std::vector<int64_t>>>& WeightShapes() {
  static const auto* shapes = new std::vector<std::pair<std::string, std::vector<int64_t>>>{
      {"stft.forward_basis_buffer", {258, 1, 256}},
      {"encoder.0.reparam_conv.weight", {128, 129, 3}},
      {"encoder.0.reparam_conv.bias", {128}},
      {"encoder.1.reparam_conv.weight", {64, 128, 3}},
      {"encoder.1.reparam_conv.bias", {64}},
      {"encoder.2.reparam_conv.weight", {64, 64, 3}},
      {"encoder.2.reparam_conv.bias", {64}},
      {"encoder.3.reparam_conv.weight", {128, 64, 3}},
      {"encoder.3.reparam_conv.bias", {128}},
      {"decoder.rnn.weight_ih", {512, 128}},
      {"decoder.rnn.weight_hh", {512, 128}},
      {"decoder.rnn.bias_ih", {512}},
      {"decoder.rnn.bias_hh", {512}},
      {"decoder.decoder.2.weight", {1, 128, 1}},
      {"decoder.decoder.2.bias", {1}},
  };
  return *shapes;
}

// A model with Silero's names and shapes and random weights (scaled by 1/sqrt(fan-in), the STFT
// basis by 1/16 so that magnitudes stay near 1), serialised as ONNX.
std::string SyntheticModel(std::mt19937& rng) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_version(15);
  for (const auto& [name, dims] : WeightShapes()) {
    int64_t numel = 1;
    for (int64_t d : dims) numel *= d;
    const double fan_in = dims.size() > 1 ? static_cast<double>(numel / dims[0]) : 16.0;
    std::normal_distribution<float> dist(0.0f, static_cast<float>(1.0 / std::sqrt(fan_in)));
    std::vector<float> values(static_cast<size_t>(numel));
    for (float& v : values) v = dist(rng);
    onnx::TensorProto* t = model.mutable_graph()->add_initializer();
    t->set_name("model." + name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  }
  std::string bytes;
  model.SerializeToString(&bytes);
  return bytes;
}

class SileroVadTest : public testing::SeededTest {
 protected:
  void SetUp() override {
    backend_ = CreateCpuBackend({.num_threads = 2});
    if (auto dir = testing::SileroVadDir()) {
      model_bytes_ = ReadFile(*dir + "/silero_vad_16k_op15.onnx");
      real_model_ = true;
    } else {
      model_bytes_ = SyntheticModel(rng_);
    }
    auto constants = OnnxConstants::Parse(model_bytes_, "model.onnx");
    ASSERT_TRUE(constants.ok()) << constants.status();
    auto vad = SileroVad::FromConstants(*constants, *backend_);
    ASSERT_TRUE(vad.ok()) << vad.status();
    vad_ = std::move(*vad);
  }
  // Speech when the shared data has it, else a chirp in noise; `frames` whole frames, starting
  // `offset` frames in (wrapping around).
  std::vector<float> Signal(int64_t frames, int64_t offset = 0) {
    if (speech_.empty()) {
      if (auto path = testing::SpeechFile("jfk.wav")) {
        auto audio = audio::LoadAudio16k(*path);
        EXPECT_TRUE(audio.ok()) << audio.status();
        if (audio.ok()) speech_ = audio->samples;
      }
      if (speech_.empty()) {
        std::normal_distribution<float> noise(0.0f, 0.02f);
        speech_.resize(16000 * 8);
        for (size_t i = 0; i < speech_.size(); ++i) {
          const double t = static_cast<double>(i) / 16000;
          speech_[i] = static_cast<float>(0.3 * std::sin(2 * M_PI * (200 + 150 * t) * t) *
                                          (0.5 + 0.5 * std::sin(2 * M_PI * 3 * t))) +
                       noise(rng_);
        }
      }
    }
    std::vector<float> out(static_cast<size_t>(frames * kVadFrameSamples));
    const size_t start = static_cast<size_t>(offset * kVadFrameSamples) % speech_.size();
    for (size_t i = 0; i < out.size(); ++i) out[i] = speech_[(start + i) % speech_.size()];
    return out;
  }

  std::vector<float> ProcessOneByOne(absl::Span<const float> samples, VadState& state) {
    std::vector<float> out;
    VadState* states[] = {&state};
    for (size_t f = 0; f < samples.size() / kVadFrameSamples; ++f) {
      auto p = vad_->Process(samples.subspan(f * kVadFrameSamples, kVadFrameSamples), states);
      EXPECT_TRUE(p.ok()) << p.status();
      if (!p.ok()) return out;
      out.push_back((*p)[0]);
    }
    return out;
  }

  std::unique_ptr<Backend> backend_;
  std::string model_bytes_;
  bool real_model_ = false;
  std::unique_ptr<SileroVad> vad_;
  std::vector<float> speech_;
};

double MaxAbsDiff(absl::Span<const float> a, absl::Span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  }
  return worst;
}

// ProcessSequence (front end batched over time, in chunks of 256 frames) equals Process() frame
// by frame, the state carries across calls of either, and Reset() gives a fresh state.
TEST_F(SileroVadTest, StateCarriesAcrossFramesAndCalls) {
  const int64_t frames = 300;  // crosses ProcessSequence's 256-frame chunks
  const std::vector<float> signal = Signal(frames, 10);
  VadState sequence_state;
  auto sequence = vad_->ProcessSequence(signal, sequence_state);
  ASSERT_TRUE(sequence.ok()) << sequence.status();
  ASSERT_EQ(sequence->size(), static_cast<size_t>(frames));
  EXPECT_EQ(sequence_state.frames(), frames);

  VadState stream_state;
  const std::vector<float> streamed = ProcessOneByOne(signal, stream_state);
  EXPECT_LE(MaxAbsDiff(*sequence, streamed), kPathTolerance);
  EXPECT_LE(MaxAbsDiff(sequence_state.h(), stream_state.h()), 1e-4);
  EXPECT_LE(MaxAbsDiff(sequence_state.c(), stream_state.c()), 1e-4);
  const std::vector<float> tail(signal.end() - kVadContextSamples, signal.end());
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), stream_state.context().begin()));
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), sequence_state.context().begin()));

  // Two ProcessSequence calls continue where the first stopped.
  VadState split_state;
  absl::Span<const float> all(signal);
  auto first = vad_->ProcessSequence(all.subspan(0, 100 * kVadFrameSamples), split_state);
  auto rest = vad_->ProcessSequence(all.subspan(100 * kVadFrameSamples), split_state);
  ASSERT_TRUE(first.ok() && rest.ok());
  first->insert(first->end(), rest->begin(), rest->end());
  EXPECT_LE(MaxAbsDiff(*first, *sequence), kPathTolerance);

  // The state matters: the same frames from a fresh state give other probabilities.
  VadState fresh;
  auto restarted = vad_->ProcessSequence(all.subspan(100 * kVadFrameSamples), fresh);
  ASSERT_TRUE(restarted.ok());
  EXPECT_GT(MaxAbsDiff(*restarted, *rest), 1e-3);

  // Reset() is a fresh state, bit for bit.
  VadState* states[] = {&stream_state};
  stream_state.Reset();
  EXPECT_EQ(stream_state.frames(), 0);
  auto after_reset = vad_->Process(all.subspan(0, kVadFrameSamples), states);
  VadState brand_new;
  VadState* new_states[] = {&brand_new};
  auto from_new = vad_->Process(all.subspan(0, kVadFrameSamples), new_states);
  ASSERT_TRUE(after_reset.ok() && from_new.ok());
  EXPECT_EQ((*after_reset)[0], (*from_new)[0]);
  EXPECT_NEAR((*after_reset)[0], (*sequence)[0], kPathTolerance);
}

// A batch of different streams gives each stream what it gets alone, across the small-batch
// (≤ 32 rows) and large-batch GEMM paths.
TEST_F(SileroVadTest, BatchOfStreamsEqualsEachAlone) {
  const int64_t frames = 12;
  for (int batch : {2, 5, 33}) {
    SCOPED_TRACE(absl::StrCat("batch ", batch));
    std::vector<std::vector<float>> signals;
    for (int b = 0; b < batch; ++b) {
      signals.push_back(Signal(frames, std::uniform_int_distribution<int64_t>(0, 400)(rng_)));
    }
    std::vector<VadState> batch_states(static_cast<size_t>(batch));
    std::vector<VadState*> state_ptrs;
    for (VadState& s : batch_states) state_ptrs.push_back(&s);
    std::vector<std::vector<float>> batched(static_cast<size_t>(batch));
    for (int64_t f = 0; f < frames; ++f) {
      std::vector<float> block;
      for (const auto& s : signals) {
        block.insert(block.end(), s.begin() + f * kVadFrameSamples,
                     s.begin() + (f + 1) * kVadFrameSamples);
      }
      auto p = vad_->Process(block, state_ptrs);
      ASSERT_TRUE(p.ok()) << p.status();
      ASSERT_EQ(p->size(), static_cast<size_t>(batch));
      for (int b = 0; b < batch; ++b) batched[b].push_back((*p)[b]);
    }
    for (int b = 0; b < batch; ++b) {
      VadState alone;
      const std::vector<float> single = ProcessOneByOne(signals[b], alone);
      EXPECT_LE(MaxAbsDiff(batched[b], single), kPathTolerance) << "stream " << b;
      EXPECT_LE(MaxAbsDiff(batch_states[b].h(), alone.h()), 1e-4) << "stream " << b;
      EXPECT_EQ(batch_states[b].frames(), frames);
    }
  }
}

// What the real model says: silence and noise are not speech, speech is.
TEST_F(SileroVadTest, SilenceIsLowAndSpeechIsHigh) {
  if (!real_model_) GTEST_SKIP() << "models/silero-vad absent (run scripts/fetch_vad)";
  auto stats = [&](const std::vector<float>& samples, float* max, double* speech_fraction) {
    VadState state;
    auto p = vad_->ProcessSequence(samples, state);
    ASSERT_TRUE(p.ok()) << p.status();
    *max = *std::max_element(p->begin(), p->end());
    *speech_fraction =
        static_cast<double>(std::count_if(p->begin(), p->end(), [](float v) { return v > 0.5f; })) /
        static_cast<double>(p->size());
  };
  float max = 0;
  double fraction = 0;
  stats(std::vector<float>(3 * 16000 / kVadFrameSamples * kVadFrameSamples, 0.0f), &max, &fraction);
  std::cout << "silence: max probability " << max << "\n";
  EXPECT_LT(max, 0.05f);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  std::vector<float> white(93 * kVadFrameSamples);
  for (float& v : white) v = noise(rng_);
  stats(white, &max, &fraction);
  std::cout << "white noise (sigma 0.1): max probability " << max << "\n";
  EXPECT_LT(max, 0.5f);
  for (const std::string name : {"jfk.wav", "ljspeech/LJ001-0001.wav"}) {
    auto path = testing::SpeechFile(name);
    if (!path) {
      std::cout << "skipping " << name << ": not in WAAV_SHARED_DATA\n";
      continue;
    }
    auto audio = audio::LoadAudio16k(*path);
    ASSERT_TRUE(audio.ok()) << audio.status();
    audio->samples.resize(audio->samples.size() / kVadFrameSamples * kVadFrameSamples);
    stats(audio->samples, &max, &fraction);
    std::cout << name << ": max probability " << max << ", " << fraction << " of frames > 0.5\n";
    EXPECT_GT(max, 0.95f) << name;
    EXPECT_GT(fraction, 0.5) << name;
  }
}

TEST_F(SileroVadTest, BadInputIsRejectedAndLeavesStatesAlone) {
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  const std::vector<float> frame = Signal(2);
  absl::Span<const float> one(frame.data(), kVadFrameSamples);
  VadState a, b;
  VadState* ab[] = {&a, &b};
  VadState* aa[] = {&a, &a};
  VadState* null_state[] = {nullptr};
  EXPECT_EQ(vad_->Process(one, ab).status().code(), kInvalid);  // 1 frame for 2 streams
  EXPECT_EQ(vad_->Process(frame, {}).status().code(), kInvalid);
  absl::Status s = vad_->Process(frame, aa).status();
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_TRUE(Contains(s, "appears twice")) << s;
  EXPECT_EQ(vad_->Process(one, null_state).status().code(), kInvalid);
  std::vector<float> bad = frame;
  bad[700] = std::numeric_limits<float>::quiet_NaN();
  s = vad_->Process(bad, ab).status();
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_TRUE(Contains(s, "sample 700 is nan")) << s;
  EXPECT_EQ(vad_->ProcessSequence(bad, a).status().code(), kInvalid);
  bad[700] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(vad_->ProcessSequence(bad, a).status().code(), kInvalid);
  EXPECT_EQ(vad_->ProcessSequence(absl::Span<const float>(frame.data(), 700), a).status().code(),
            kInvalid);
  for (const VadState* state : {&a, &b}) {
    EXPECT_EQ(state->frames(), 0);
    for (float v : state->h()) EXPECT_EQ(v, 0.0f);
    for (float v : state->context()) EXPECT_EQ(v, 0.0f);
  }
  auto empty = vad_->ProcessSequence({}, a);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(a.frames(), 0);
}

// Load errors name the file and the weight; the model's own file is rewritten through waav's
// schema to drop or reshape one weight.
TEST_F(SileroVadTest, LoadErrorsNameFileAndWeight) {
  const fs::path dir = testing::MakeTempDir("waav-silero");
  absl::Status s = SileroVad::Load((dir / "absent.onnx").string(), *backend_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s, "absent.onnx")) << s;
  const fs::path text = dir / "notes.onnx";
  std::ofstream(text) << "these are not the weights you are looking for\n";
  s = SileroVad::Load(text.string(), *backend_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "notes.onnx: not an ONNX model")) << s;

  auto rewrite = [&](const std::function<void(onnx::ModelProto&)>& edit) {
    onnx::ModelProto model;
    EXPECT_TRUE(model.ParseFromString(model_bytes_));
    edit(model);
    const fs::path path = dir / "edited.onnx";
    std::ofstream(path, std::ios::binary) << model.SerializeAsString();
    return SileroVad::Load(path.string(), *backend_).status();
  };
  auto find = [](onnx::ModelProto& model, const std::string& name) -> onnx::TensorProto* {
    for (onnx::TensorProto& t : *model.mutable_graph()->mutable_initializer()) {
      if (t.name() == name) return &t;
    }
    ADD_FAILURE() << name << " not in the model";
    return nullptr;
  };
  // As read, the file loads.
  EXPECT_TRUE(rewrite([](onnx::ModelProto&) {}).ok());
  s = rewrite([&](onnx::ModelProto& model) {
    auto* list = model.mutable_graph()->mutable_initializer();
    for (int i = 0; i < list->size(); ++i) {
      if (list->Get(i).name() == "model.decoder.rnn.bias_hh") {
        list->DeleteSubrange(i, 1);
        break;
      }
    }
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s, "edited.onnx: no constant tensor named 'model.decoder.rnn.bias_hh'"))
      << s;
  // Same bytes, other dims: the reader accepts the tensor, the model refuses its shape.
  s = rewrite([&](onnx::ModelProto& model) {
    onnx::TensorProto* t = find(model, "model.encoder.1.reparam_conv.weight");
    t->set_dims(1, 384);
    t->set_dims(2, 1);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s,
                       "'model.encoder.1.reparam_conv.weight' has shape [64, 384, 1], "
                       "expected [64, 128, 3]"))
      << s;
  s = rewrite([&](onnx::ModelProto& model) {
    onnx::TensorProto* t = find(model, "model.decoder.decoder.2.bias");
    t->set_data_type(onnx::TensorProto::INT32);
  });
  EXPECT_TRUE(Contains(s, "'model.decoder.decoder.2.bias' is int32, not float32")) << s;
  // Without the 16 kHz STFT basis the file is not taken for Silero VAD at all.
  s = rewrite([&](onnx::ModelProto& model) {
    find(model, "model.stft.forward_basis_buffer")->set_name("model.stft.basis");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "no 16 kHz Silero VAD STFT basis")) << s;
  fs::remove_all(dir);
}

// Random byte flips in the model file: loading fails with an error or succeeds (a flip inside a
// weight only changes it), and a model that loads runs. Never a crash.
TEST_F(SileroVadTest, FlippedModelBytesNeverCrash) {
  const std::vector<float> frame = Signal(1);
  int rejected = 0, ran = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::string bytes = model_bytes_;
    const size_t span = trial % 2 == 0 ? std::min<size_t>(bytes.size(), 16384) : bytes.size();
    const int flips = std::uniform_int_distribution<int>(1, 12)(rng_);
    for (int f = 0; f < flips; ++f) {
      bytes[std::uniform_int_distribution<size_t>(0, span - 1)(rng_)] =
          static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng_));
    }
    auto constants = OnnxConstants::Parse(bytes, "flipped.onnx");
    if (!constants.ok()) {
      ++rejected;
      continue;
    }
    auto vad = SileroVad::FromConstants(*constants, *backend_);
    if (!vad.ok()) {
      EXPECT_TRUE(Contains(vad.status(), "flipped.onnx")) << vad.status();
      ++rejected;
      continue;
    }
    VadState state;
    VadState* states[] = {&state};
    auto p = (*vad)->Process(frame, states);
    ASSERT_TRUE(p.ok()) << p.status();
    ++ran;
  }
  std::cout << "flipped models: " << rejected << " rejected, " << ran << " loaded and ran\n";
}

}  // namespace
}  // namespace waav::vad
