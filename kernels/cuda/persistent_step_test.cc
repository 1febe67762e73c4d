// The persistent decoder step's refusals (kernels/cuda/persistent_step.h): host-side, so they run
// without a GPU. Its results are checked by whisper_fused_step_cuda_test (engine) and
// persistent_whisper_step_test (bench).
#include "kernels/cuda/persistent_step.h"

#include <string>

#include "gtest/gtest.h"
#include "kernels/cuda/persistent_decoder.cuh"

namespace waav::cuda {
namespace {

DecoderStepDims TinyDims() {
  return {.d_model = 384,
          .n_heads = 6,
          .ffn_dim = 1536,
          .n_layers = 4,
          .n_vocab = 51864,
          .n_positions = 448,
          .n_source = 1500};
}

TEST(PersistentStepDims, TakesWhisperTinyUpTo8Rows) {
  for (int batch : {1, 3, 8}) EXPECT_TRUE(CheckPersistentStepDims(TinyDims(), batch).ok());
  DecoderStepDims two_layers = TinyDims();
  two_layers.n_layers = 2;
  EXPECT_TRUE(CheckPersistentStepDims(two_layers).ok());
}

TEST(PersistentStepDims, RefusesOtherShapesNamingThem) {
  auto expect_refused = [](const DecoderStepDims& dims, int batch, const std::string& says) {
    const absl::Status s = CheckPersistentStepDims(dims, batch);
    EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
    EXPECT_NE(s.message().find(says), std::string::npos) << s << " (want '" << says << "')";
    EXPECT_NE(s.message().find("d_model 384, 6 heads"), std::string::npos) << s;
  };
  DecoderStepDims base = TinyDims();  // Whisper base: 512 wide, 8 heads, 6 layers
  base.d_model = 512;
  base.n_heads = 8;
  base.ffn_dim = 2048;
  base.n_layers = 6;
  expect_refused(base, 1, "d_model 512, 8 heads, FFN 2048, 6 layers");
  DecoderStepDims five = TinyDims();
  five.n_layers = 5;
  expect_refused(five, 1, "5 layers");
  expect_refused(TinyDims(), 9, "9 rows");
  expect_refused(TinyDims(), 0, "0 rows");
}

// The cooperative kernel's shared memory (PersistentDecoderSharedBytes), against the limits
// drivers report per block: an A100's 163 KB takes every bucket (so the step runs up to 8 rows
// there), an Ada part's 99 KB none (op by op there), a Hopper's 227 KB all.
TEST(PersistentStepSharedMemory, FitsAnA100NotAda) {
  constexpr size_t kA100 = 166912, kAda = 101376, kHopper = 232448;
  EXPECT_EQ(PersistentDecoderSharedBytes(1, 108), size_t{120832});
  EXPECT_EQ(PersistentDecoderSharedBytes(8, 108), size_t{163840});
  for (int batch = 1; batch <= kPersistentMaxBatch; ++batch) {
    SCOPED_TRACE(batch);
    EXPECT_LE(PersistentDecoderSharedBytes(batch, 108), kA100);
    EXPECT_GT(PersistentDecoderSharedBytes(batch, 58), kAda);
    EXPECT_LE(PersistentDecoderSharedBytes(batch, 132), kHopper);
  }
  // Buckets: 3 and 4 rows alike, 5 to 8 alike, more rows never less.
  EXPECT_EQ(PersistentDecoderSharedBytes(3, 132), PersistentDecoderSharedBytes(4, 132));
  EXPECT_EQ(PersistentDecoderSharedBytes(5, 132), PersistentDecoderSharedBytes(8, 132));
  EXPECT_LT(PersistentDecoderSharedBytes(2, 132), PersistentDecoderSharedBytes(4, 132));
}

}  // namespace
}  // namespace waav::cuda
