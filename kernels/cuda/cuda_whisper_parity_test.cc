// Parity of whole Whisper passes on the CUDA backend with the CPU backend, on random weights of
// tiny.en's shapes: the encoder pass, decoder steps and a replayed step graph, for every backend
// variant of cuda_parity_fixture.h (tolerances: cuda_backend_test.cc).
#include "kernels/cuda/cuda_parity_fixture.h"

namespace waav {
namespace {

// ---- Whisper, random weights of tiny.en's shapes ------------------------------------------------

class CudaWhisperTest : public CudaParityTest {
 protected:
  static void TearDownTestSuite() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    CudaParityTest::SetUp();
    if (IsSkipped()) return;
    if (dir_.empty()) {  // written once, only where a GPU runs the tests
      dir_ = waav::testing::MakeTempDir("waav-cuda-whisper");
      model_ok_ = waav::testing::WriteRandomWhisperModel(dir_.string(), seed_);
    }
    ASSERT_TRUE(model_ok_) << "cannot write the random model into " << dir_;
    whisper::WhisperModelOptions options;
    options.weight_dtype = DType::kF16;  // the file's values; both backends widen them exactly
    auto cpu = whisper::WhisperModel::Load(dir_.string(), *cpu_, options);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto gpu = whisper::WhisperModel::Load(dir_.string(), *gpu_, options);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    cpu_model_ = std::move(*cpu);
    gpu_model_ = std::move(*gpu);
  }
  double ModelTolerance() const { return fast() ? 2e-3 : 1e-4; }

  static std::filesystem::path dir_;
  static bool model_ok_;
  std::unique_ptr<whisper::WhisperModel> cpu_model_, gpu_model_;
};
std::filesystem::path CudaWhisperTest::dir_;
bool CudaWhisperTest::model_ok_ = false;

TEST_P(CudaWhisperTest, EncoderPassMatchesCpu) {
  const whisper::WhisperDims& d = cpu_model_->dims();
  for (int batch : {1, 2}) {
    const std::vector<float> mel = Random(int64_t{batch} * d.n_mels * d.n_frames(), -1.5f, 1.5f);
    auto want = cpu_model_->EncoderOutput(mel, batch);
    auto got = gpu_model_->EncoderOutput(mel, batch);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(Close(absl::StrCat("Whisper encoder output, batch ", batch), *got, *want,
                      ModelTolerance()));
  }
}

// Batch 2 (the GEMMs of at most 8 rows: the skinny kernel) and 12 (HalfGemm or cuBLAS; Q, K and
// V through LinearPlanes where the variant has it).
TEST_P(CudaWhisperTest, DecoderStepsAndReplayedStepGraphMatchCpu) {
  const whisper::WhisperDims& d = cpu_model_->dims();
  for (const int batch : {2, 12}) {
    SCOPED_TRACE(absl::StrCat("batch ", batch));
    const std::vector<float> mel = Random(int64_t{batch} * d.n_mels * d.n_frames(), -1.5f, 1.5f);
    auto cpu_state = cpu_model_->NewDecoderState(batch);
    auto gpu_state = gpu_model_->NewDecoderState(batch);
    ASSERT_TRUE(cpu_state.ok() && gpu_state.ok());
    ASSERT_TRUE(cpu_model_->Encode(mel, **cpu_state).ok());
    ASSERT_TRUE(gpu_model_->Encode(mel, **gpu_state).ok());
    auto random_tokens = [&] {
      std::vector<int32_t> tokens;
      for (int r = 0; r < batch; ++r) tokens.push_back(RandomInt(0, 50000));
      return tokens;
    };
    const std::string at = absl::StrCat(" (batch ", batch, ")");

    // A 3-token prompt per row, then single-token steps through Decode (which runs DecodeStep).
    std::vector<int32_t> prompt;
    for (int r = 0; r < batch; ++r)
      prompt.insert(prompt.end(), {50257, 50362, RandomInt(0, 50000)});
    const std::vector<int32_t> zero(static_cast<size_t>(batch), 0);
    auto want = cpu_model_->Decode(prompt, 3, zero, **cpu_state);
    auto got = gpu_model_->Decode(prompt, 3, zero, **gpu_state);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    EXPECT_TRUE(Close("Whisper prompt logits" + at, *got, *want, ModelTolerance()));
    int32_t position = 3;
    for (int s = 0; s < 3; ++s, ++position) {
      const std::vector<int32_t> positions(static_cast<size_t>(batch), position);
      const std::vector<int32_t> tokens = random_tokens();
      want = cpu_model_->Decode(tokens, 1, positions, **cpu_state);
      got = gpu_model_->Decode(tokens, 1, positions, **gpu_state);
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
      EXPECT_TRUE(Close(absl::StrCat("Whisper step logits at ", position, at), *got, *want,
                        ModelTolerance()));
    }

    // The same step captured once on the GPU and replayed with new inputs each time.
    ASSERT_TRUE(gpu_->BeginCapture().ok());
    ASSERT_TRUE(gpu_model_->DecodeStep(**gpu_state).ok());
    auto graph = gpu_->EndCapture();
    ASSERT_TRUE(graph.ok()) << graph.status();
    std::cout << "Whisper decoder step graph" << at << ": " << (*graph)->num_nodes()
              << " kernel calls\n";
    for (int s = 0; s < 4; ++s, ++position) {
      const std::vector<int32_t> tokens = random_tokens();
      const std::vector<int32_t> positions(static_cast<size_t>(batch), position);
      const std::vector<int32_t> lengths(static_cast<size_t>(batch), position + 1);
      const whisper::DecoderState& st = **gpu_state;
      const size_t bytes = static_cast<size_t>(batch) * 4;
      ASSERT_TRUE(gpu_->CopyFromHost(tokens.data(), bytes, st.step_tokens()).ok());
      ASSERT_TRUE(gpu_->CopyFromHost(positions.data(), bytes, st.positions()).ok());
      ASSERT_TRUE(gpu_->CopyFromHost(lengths.data(), bytes, st.lengths()).ok());
      ASSERT_TRUE((*graph)->Replay().ok());
      got = Download<float>(*gpu_, st.step_logits());
      want = cpu_model_->Decode(tokens, 1, positions, **cpu_state);
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
      EXPECT_TRUE(Close(absl::StrCat("Whisper replayed step logits at ", position, at), *got, *want,
                        ModelTolerance()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaWhisperTest, ::testing::ValuesIn(kVariants), VariantName);

}  // namespace
}  // namespace waav
