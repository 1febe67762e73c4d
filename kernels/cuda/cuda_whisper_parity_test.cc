// Parity of whole Whisper passes on the CUDA backend with the CPU backend, on random weights:
// the encoder pass, decoder steps and a replayed step graph. Tiny.en's shapes for every backend
// variant of cuda_parity_fixture.h (tolerances: cuda_backend_test.cc); the larger models' shapes
// (base, which scripts/fetch_model serves, small, and medium's and large-v3's widths with two
// layers a stack: wider rows, more heads and layers, the multilingual vocabularies' 51865 and
// 51866 tokens, large-v3's 128 mel bins) with the defaults and the accurate variant. The
// fused decoder step takes Whisper tiny's dims only, so base and small step op by op; base
// (d_model 512) also takes the absorbed cross-attention, small (768) keeps the K/V caches.
#include <map>

#include "kernels/cuda/cuda_parity_fixture.h"

namespace waav {
namespace {

// ---- Whisper, random weights of a model's shapes ----------------------------------------------

struct WhisperShape {
  const char* name;
  testing::RandomWhisperDims dims;
};
const WhisperShape kTinyEn{"tiny.en", {}};
const WhisperShape kBase{"base", {.d_model = 512, .n_heads = 8, .n_layers = 6, .n_vocab = 51865}};
const WhisperShape kSmall{"small",
                          {.d_model = 768, .n_heads = 12, .n_layers = 12, .n_vocab = 51865}};
// Medium's and large-v3's widths, heads, mel bins (large-v3: 128) and vocabularies (51866), with
// 2 of their 24 and 32 layers a stack: every kernel sees the real shapes, the CPU's reference
// stays quick and the random file small (~320 MB for large-v3's).
const WhisperShape kMedium{"medium-2-layers",
                           {.d_model = 1024, .n_heads = 16, .n_layers = 2, .n_vocab = 51865}};
const WhisperShape kLargeV3{
    "large-v3-2-layers",
    {.n_mels = 128, .d_model = 1280, .n_heads = 20, .n_layers = 2, .n_vocab = 51866}};

class CudaWhisperTest : public CudaParityTest {
 protected:
  static void TearDownTestSuite() {
    for (const auto& [name, dir] : dirs_) std::filesystem::remove_all(dir);
    dirs_.clear();
    written_.clear();
  }
  // The folder of `shape`'s random model, written once per test suite (only where a GPU runs
  // the tests).
  std::string ModelDir(const WhisperShape& shape) {
    auto [it, fresh] = dirs_.try_emplace(shape.name);
    if (fresh) {
      it->second = waav::testing::MakeTempDir(absl::StrCat("waav-cuda-whisper-", shape.name));
      written_[shape.name] =
          waav::testing::WriteRandomWhisperModel(it->second.string(), seed_, shape.dims);
    }
    EXPECT_TRUE(written_[shape.name]) << "cannot write the random model into " << it->second;
    return it->second.string();
  }
  // `shape`'s random model loaded on both backends.
  void LoadModels(const WhisperShape& shape) {
    const std::string dir = ModelDir(shape);
    ASSERT_FALSE(HasFailure());
    whisper::WhisperModelOptions options;
    options.weight_dtype = DType::kF16;  // the file's values; both backends widen them exactly
    auto cpu = whisper::WhisperModel::Load(dir, *cpu_, options);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    auto gpu = whisper::WhisperModel::Load(dir, *gpu_, options);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    cpu_model_ = std::move(*cpu);
    gpu_model_ = std::move(*gpu);
  }
  double ModelTolerance() const { return fast() ? 2e-3 : 1e-4; }

  // The encoder output of random log-mel windows, `batch` at once.
  void CheckEncoderPass(int batch);
  // A 3-token prompt per row, single-token steps through Decode, then the step captured once and
  // replayed with new inputs.
  void CheckDecoderSteps(int batch);

  static std::map<std::string, std::filesystem::path> dirs_;
  static std::map<std::string, bool> written_;
  std::unique_ptr<whisper::WhisperModel> cpu_model_, gpu_model_;
};
std::map<std::string, std::filesystem::path> CudaWhisperTest::dirs_;
std::map<std::string, bool> CudaWhisperTest::written_;

void CudaWhisperTest::CheckEncoderPass(int batch) {
  const whisper::WhisperDims& d = cpu_model_->dims();
  const std::vector<float> mel = Random(int64_t{batch} * d.n_mels * d.n_frames(), -1.5f, 1.5f);
  auto want = cpu_model_->EncoderOutput(mel, batch);
  auto got = gpu_model_->EncoderOutput(mel, batch);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(
      Close(absl::StrCat("Whisper encoder output, batch ", batch), *got, *want, ModelTolerance()));
}

void CudaWhisperTest::CheckDecoderSteps(int batch) {
  const whisper::WhisperDims& d = cpu_model_->dims();
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
  for (int r = 0; r < batch; ++r) prompt.insert(prompt.end(), {50257, 50362, RandomInt(0, 50000)});
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

TEST_P(CudaWhisperTest, EncoderPassMatchesCpu) {
  LoadModels(kTinyEn);
  for (int batch : {1, 2}) CheckEncoderPass(batch);
}

// Batch 2 (the GEMMs of at most 8 rows: the skinny kernel; tiny.en's fused step) and 12
// (HalfGemm or cuBLAS; Q, K and V through LinearPlanes where the variant has it).
TEST_P(CudaWhisperTest, DecoderStepsAndReplayedStepGraphMatchCpu) {
  LoadModels(kTinyEn);
  for (const int batch : {2, 12}) CheckDecoderSteps(batch);
}

INSTANTIATE_TEST_SUITE_P(Variants, CudaWhisperTest, ::testing::ValuesIn(kVariants), VariantName);

// The larger models' shapes: the defaults ("Fast") and the accurate variant.
class CudaWhisperLargerTest : public CudaWhisperTest {};

TEST_P(CudaWhisperLargerTest, BaseEncoderAndDecoderMatchCpu) {
  LoadModels(kBase);
  CheckEncoderPass(2);
  for (const int batch : {1, 12}) CheckDecoderSteps(batch);
}

TEST_P(CudaWhisperLargerTest, SmallEncoderAndDecoderMatchCpu) {
  LoadModels(kSmall);
  CheckEncoderPass(1);
  for (const int batch : {1, 12}) CheckDecoderSteps(batch);
}

TEST_P(CudaWhisperLargerTest, MediumShapesMatchCpu) {
  LoadModels(kMedium);
  CheckEncoderPass(1);
  for (const int batch : {1, 12}) CheckDecoderSteps(batch);
}

TEST_P(CudaWhisperLargerTest, LargeV3ShapesMatchCpu) {
  LoadModels(kLargeV3);
  ASSERT_EQ(gpu_model_->dims().n_mels, 128);
  ASSERT_EQ(gpu_model_->dims().n_vocab, 51866);
  CheckEncoderPass(1);
  for (const int batch : {1, 12}) CheckDecoderSteps(batch);
}

// The fused step is Whisper tiny's: asked for with other dims, the load fails and says why.
TEST_P(CudaWhisperLargerTest, FusedStepRefusesBaseWithAReason) {
  auto model = whisper::WhisperModel::Load(ModelDir(kBase), *gpu_,
                                           {.fused_decoder_step = whisper::GraphUse::kAlways});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kUnimplemented) << model.status();
  EXPECT_NE(model.status().message().find("asked for d_model 512"), std::string::npos)
      << model.status();
}

const Variant kLargerVariants[] = {kVariants[0], kVariants[1]};
INSTANTIATE_TEST_SUITE_P(Variants, CudaWhisperLargerTest, ::testing::ValuesIn(kLargerVariants),
                         VariantName);

}  // namespace
}  // namespace waav
