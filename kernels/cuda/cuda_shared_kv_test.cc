// SharedKvAttention (shared_kv_attention.cu: several query heads over f16 keys that are also the
// values, on tensor cores) against the CPU backend's on fresh random inputs: Whisper tiny's and
// base's widths, one and several key ranges (merged by the last block), ranges and tiles that
// end inside a tile, several groups of 8 queries, rows whose queries do not fill a group. Also
// Copy's f32 → f16 conversion (how the encoder output reaches such a cache) and the plan's rules,
// which need no GPU.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/backend_util.h"
#include "kernels/cuda/cuda_parity_fixture.h"
#include "kernels/cuda/shared_kv_attention.cuh"

namespace waav {
namespace {

cuda::SharedKvArgs PlanArgs(int64_t batch, int64_t queries, int64_t kv_len, int width) {
  alignas(16) static float storage[4] = {};
  cuda::SharedKvArgs a;
  a.q = storage;
  a.out = storage;
  a.kv = storage;
  a.batch = batch;
  a.queries = queries;
  a.kv_len = kv_len;
  a.width = width;
  return a;
}

TEST(SharedKvAttentionPlan, SplitsKeysUntilTheGridFillsTheChipOnce) {
  if (!cuda::SharedKvAttentionAvailable()) GTEST_SKIP() << "no tensor-core kernel in this build";
  // The deep pipeline: one block per SM with 5 tiles of 48 keys at width 384 (3 of 64 at 512, 6
  // of 16 at 64), so 8 ranges at 16 rows.
  const auto deep = [](const cuda::SharedKvArgs& a) {
    return cuda::PlanSharedKvAttention(a, cuda::kH100Shape, 1 << 20, 0, /*deep_pipeline=*/true);
  };
  cuda::SharedKvPlan p = deep(PlanArgs(16, 6, 1500, 384));
  EXPECT_EQ(p.stages, 5);
  EXPECT_EQ(p.splits, cuda::kH100Shape.sm_count / 16);
  EXPECT_EQ(deep(PlanArgs(2, 8, 10, 512)).stages, 3);
  EXPECT_EQ(deep(PlanArgs(2, 8, 10, 64)).stages, 6);
  // Double-buffered (the default; the rest of this test): 91 KB a block at width 384, 2
  // resident per SM.
  EXPECT_EQ(
      cuda::PlanSharedKvAttention(PlanArgs(16, 6, 1500, 384), cuda::kH100Shape, 1 << 20).stages, 2);
  const auto plan = [](const cuda::SharedKvArgs& a, const cuda::GpuShape& gpu, int64_t counters,
                       int splits = 0) {
    return cuda::PlanSharedKvAttention(a, gpu, counters, splits, /*deep_pipeline=*/false);
  };
  p = plan(PlanArgs(16, 6, 1500, 384), cuda::kH100Shape, 1 << 20);
  EXPECT_EQ(p.stages, 2);
  ASSERT_TRUE(p.supported);
  EXPECT_EQ(p.splits, 16);  // 264 resident blocks / 16 rows: ranges of 2 tiles of 48 keys
  EXPECT_EQ(p.keys_per_split % 48, 0);
  EXPECT_GE(p.splits * p.keys_per_split, 1500);
  EXPECT_LT((p.splits - 1) * p.keys_per_split, 1500);
  EXPECT_EQ(p.counters, 16);
  EXPECT_EQ(p.partial_bytes, size_t{16} * p.splits * 8 * (384 + 2) * sizeof(float));
  // Enough rows fill the chip unsplit.
  p = plan(PlanArgs(256, 6, 1500, 384), cuda::kH100Shape, 1 << 20);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.partial_bytes, 0u);
  EXPECT_EQ(p.counters, 0);
  // One row: at most 16 ranges (the merge's bound), and never more than tiles.
  p = plan(PlanArgs(1, 6, 1500, 384), cuda::kH100Shape, 1 << 20);
  EXPECT_EQ(p.splits, 16);
  EXPECT_EQ(plan(PlanArgs(1, 6, 100, 384), cuda::kH100Shape, 1 << 20).splits, 3);
  EXPECT_EQ(plan(PlanArgs(1, 6, 1500, 384), cuda::kH100Shape, 1 << 20, 40).splits, 16);
  // Forced ranges; fewer counters than (row, group) items: unsplit.
  EXPECT_EQ(plan(PlanArgs(16, 6, 1500, 384), cuda::kH100Shape, 1 << 20, 3).splits, 3);
  EXPECT_EQ(plan(PlanArgs(16, 6, 1500, 384), cuda::kH100Shape, 15).splits, 1);
  // 12 queries make two groups.
  EXPECT_EQ(plan(PlanArgs(4, 12, 1500, 384), cuda::kH100Shape, 1 << 20).counters, 8);
  // L2 hints: none by default; else the whole rows that fit in the bytes given (1500 keys of
  // 384 f16: 1152000 bytes a row), at most the batch.
  EXPECT_EQ(plan(PlanArgs(64, 6, 1500, 384), cuda::kH100Shape, 1 << 20).retain_rows, -1);
  const auto retain = [](int64_t batch, int64_t bytes) {
    return cuda::PlanSharedKvAttention(PlanArgs(batch, 6, 1500, 384), cuda::kH100Shape, 1 << 20, 0,
                                       false, bytes)
        .retain_rows;
  };
  EXPECT_EQ(retain(64, 0), 0);
  EXPECT_EQ(retain(64, 1152000 - 1), 0);
  EXPECT_EQ(retain(64, 1152000), 1);
  EXPECT_EQ(retain(64, int64_t{32} << 20), 29);
  EXPECT_EQ(retain(16, int64_t{32} << 20), 16);
  // Refused: widths off the 64 grid or above 512, one key short, misaligned kv or out.
  EXPECT_TRUE(plan(PlanArgs(2, 8, 10, 512), cuda::kH100Shape, 1 << 20).supported);
  EXPECT_TRUE(plan(PlanArgs(2, 8, 10, 64), cuda::kH100Shape, 1 << 20).supported);
  EXPECT_FALSE(plan(PlanArgs(2, 8, 10, 576), cuda::kH100Shape, 1 << 20).supported);
  EXPECT_FALSE(plan(PlanArgs(2, 8, 10, 96), cuda::kH100Shape, 1 << 20).supported);
  EXPECT_FALSE(plan(PlanArgs(2, 8, 0, 384), cuda::kH100Shape, 1 << 20).supported);
  cuda::SharedKvArgs a = PlanArgs(2, 8, 10, 384);
  a.kv = reinterpret_cast<const char*>(a.kv) + 8;
  EXPECT_FALSE(plan(a, cuda::kH100Shape, 1 << 20).supported);
  for (const int offset : {1, 2}) {  // 4 or 8 bytes off
    a = PlanArgs(2, 8, 10, 384);
    a.out = static_cast<float*>(a.out) + offset;
    EXPECT_FALSE(plan(a, cuda::kH100Shape, 1 << 20).supported);
  }
}

// An i8 kv (kv_scales given): two stages (session 30's kernel ran faster in two than in three),
// up to three blocks a multiprocessor (its launch bound) where shared memory holds them; three
// stages where asked for and they fit; no L2 hints; the scales 8-byte aligned.
TEST(SharedKvAttentionPlan, AnI8KvTakesTwoStagesAndUpToThreeBlocks) {
  if (!cuda::SharedKvAttentionAvailable()) GTEST_SKIP() << "no tensor-core kernel in this build";
  constexpr cuda::GpuShape kA100{108, 166912, 167936};
  constexpr cuda::GpuShape kAda{58, 101376, 102400};
  const auto i8 = [](int64_t batch, int width) {
    cuda::SharedKvArgs a = PlanArgs(batch, 6, 1500, width);
    alignas(16) static float scales[2] = {};
    a.kv_scales = scales;
    return a;
  };
  const auto plan = [](const cuda::SharedKvArgs& a, const cuda::GpuShape& gpu, bool deep = false,
                       int64_t retain = -1, int stages = 0) {
    return cuda::PlanSharedKvAttention(a, gpu, 1 << 20, 0, deep, retain, stages);
  };
  cuda::SharedKvPlan p = plan(i8(16, 384), cuda::kH100Shape);
  ASSERT_TRUE(p.supported);
  EXPECT_EQ(p.stages, 2);
  EXPECT_EQ(p.splits, 16);  // 3 resident blocks a multiprocessor (f16's: 2), 16 at most
  EXPECT_EQ(plan(i8(64, 384), cuda::kH100Shape).splits, 3 * 132 / 64);
  EXPECT_EQ(plan(i8(256, 384), cuda::kH100Shape).splits, 1);
  // One range a row within two blocks a multiprocessor: the queries' terms held in registers.
  EXPECT_TRUE(plan(i8(256, 384), cuda::kH100Shape).hold_queries);
  EXPECT_FALSE(plan(i8(300, 384), cuda::kH100Shape).hold_queries);  // more than two blocks an SM
  EXPECT_FALSE(plan(i8(64, 384), cuda::kH100Shape).hold_queries);   // 6 ranges a row
  EXPECT_FALSE(plan(i8(256, 384), cuda::kH100Shape, false, -1, 3).hold_queries);
  EXPECT_FALSE(plan(PlanArgs(256, 6, 1500, 384), cuda::kH100Shape).hold_queries);  // f16
  EXPECT_EQ(plan(i8(16, 384), cuda::kH100Shape, /*deep=*/true).stages, 6);
  p = plan(i8(64, 384), cuda::kH100Shape, false, -1, /*stages=*/3);
  EXPECT_EQ(p.stages, 3);
  EXPECT_EQ(p.splits, 3 * 132 / 64);  // three 67 KB blocks fit an H100's 228 KB
  p = plan(i8(64, 384), kA100);
  EXPECT_EQ(p.stages, 2);
  EXPECT_EQ(p.splits, 3 * 108 / 64);  // three 48.5 KB blocks in its 164 KB
  EXPECT_EQ(plan(i8(64, 384), kA100, false, -1, 3).splits, 2 * 108 / 64);  // two 67 KB ones
  p = plan(i8(16, 384), kAda);
  ASSERT_TRUE(p.supported);
  EXPECT_EQ(p.stages, 2);
  EXPECT_EQ(p.splits, 58 / 16);  // one block in its 100 KB a multiprocessor
  EXPECT_EQ(plan(i8(16, 384), kAda, false, -1, /*stages=*/3).stages, 3);
  // Base's width: 98.5 KB a block of two i8 stages (the f16 block's 148 KB does not fit Ada, so
  // the engine keeps base's plain cross-attention there: SharedKvMaxWidth).
  EXPECT_TRUE(plan(i8(2, 512), kAda).supported);
  EXPECT_EQ(plan(i8(2, 512), kAda).stages, 2);
  EXPECT_TRUE(plan(i8(2, 512), kA100).supported);
  EXPECT_EQ(plan(i8(64, 384), cuda::kH100Shape, false, int64_t{32} << 20).retain_rows, -1);
  cuda::SharedKvArgs a = i8(2, 384);
  a.kv_scales = a.kv_scales + 1;  // 4 bytes off
  EXPECT_FALSE(plan(a, cuda::kH100Shape).supported);
}

// The backend's options are checked before a device opens: shared_kv_i8_stages 0, 2 or 3.
TEST(SharedKvAttentionPlan, BackendOptionsTakeOnlyTheStagesTheKernelHas) {
  CudaBackendOptions options;
  EXPECT_TRUE(cuda::ValidateOptions(options).ok());
  for (const int stages : {2, 3}) {
    options.shared_kv_i8_stages = stages;
    EXPECT_TRUE(cuda::ValidateOptions(options).ok()) << stages;
  }
  for (const int stages : {-1, 1, 4, 6}) {
    options.shared_kv_i8_stages = stages;
    const absl::Status status = cuda::ValidateOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << stages;
    EXPECT_NE(status.message().find("shared_kv_i8_stages"), std::string::npos) << status;
  }
  options = CudaBackendOptions{};
  options.shared_kv_l2_retain_bytes = -2;
  EXPECT_EQ(cuda::ValidateOptions(options).code(), absl::StatusCode::kInvalidArgument);
  options = CudaBackendOptions{};
  options.skinny_max_rows = -1;
  EXPECT_EQ(cuda::ValidateOptions(options).code(), absl::StatusCode::kInvalidArgument);
}

// Smaller GPUs (shapes as their drivers report them): an A100 (108 multiprocessors, 163 KB a
// block) and an Ada part such as an L4 (58, 99 KB) take two tiles where the deep pipeline is
// asked for, fewer blocks per multiprocessor, and Ada no kernel at width 512 (148 KB a block).
TEST(SharedKvAttentionPlan, FitsTheDevicesSharedMemory) {
  if (!cuda::SharedKvAttentionAvailable()) GTEST_SKIP() << "no tensor-core kernel in this build";
  constexpr cuda::GpuShape kA100{108, 166912, 167936};
  constexpr cuda::GpuShape kAda{58, 101376, 102400};
  const auto deep = [](const cuda::SharedKvArgs& a, const cuda::GpuShape& gpu) {
    return cuda::PlanSharedKvAttention(a, gpu, 1 << 20, 0, /*deep_pipeline=*/true);
  };
  cuda::SharedKvPlan p = deep(PlanArgs(16, 6, 1500, 384), kA100);
  ASSERT_TRUE(p.supported);
  EXPECT_EQ(p.stages, 2);
  EXPECT_EQ(p.splits, 108 / 16);  // one 87 KB block per multiprocessor
  EXPECT_TRUE(deep(PlanArgs(2, 8, 10, 512), kA100).supported);
  p = deep(PlanArgs(16, 6, 1500, 384), kAda);
  ASSERT_TRUE(p.supported);
  EXPECT_EQ(p.stages, 2);
  EXPECT_EQ(p.splits, 58 / 16);
  EXPECT_FALSE(deep(PlanArgs(2, 8, 10, 512), kAda).supported);
  EXPECT_FALSE(cuda::PlanSharedKvAttention(PlanArgs(2, 8, 10, 512), kAda, 1 << 20).supported);
  // The widest width each takes (the engine's absorbed cross-attention up to it).
  EXPECT_EQ(cuda::SharedKvMaxWidth(cuda::kH100Shape), 512);
  EXPECT_EQ(cuda::SharedKvMaxWidth(kA100), 512);
  EXPECT_EQ(cuda::SharedKvMaxWidth(kAda), 384);
  EXPECT_EQ(cuda::SharedKvMaxWidth(cuda::GpuShape{}), 0);
  // No device (a failed query): no kernel.
  EXPECT_FALSE(
      cuda::PlanSharedKvAttention(PlanArgs(2, 6, 1500, 384), cuda::GpuShape{}, 1 << 20).supported);
}

// Runs once, on the default options ("Fast"), where the backend offers the op.
bool SharedKvVariant(const Variant& v) {
  return v.defaults && !v.encoder_no_pdl && !v.decode_attention;
}

TEST_P(CudaParityTest, SharedKvAttentionMatchesCpu) {
  if (!SharedKvVariant(GetParam())) GTEST_SKIP() << "run on the Fast variant only";
  ASSERT_TRUE(gpu_->supports(Op::kSharedKvAttention));
  struct Case {
    int64_t batch, q_len, kv_len, heads, width;
    int splits;  // CudaBackendOptions::shared_kv_splits (0: the plan's)
  };
  for (const Case c : {
           Case{1, 1, 1500, 6, 384, 0},   // Whisper tiny, one row: 32 key ranges
           Case{16, 1, 1500, 6, 384, 0},  // 16 ranges of 96 keys, the last one shorter
           Case{64, 1, 1500, 6, 384, 0},  // 4 ranges
           Case{300, 1, 100, 6, 384, 0},  // unsplit, the last tile partial
           Case{3, 1, 77, 6, 384, 1},     // one range ending inside its second tile
           Case{3, 1, 77, 6, 384, 2},     // two ranges, of 48 and 29 keys
           Case{2, 1, 1, 8, 512, 0},      // Whisper base's width, a single key
           Case{5, 1, 700, 8, 512, 3},    // base, 3 ranges
           Case{2, 3, 50, 2, 64, 0},      // several queries a row, one warp
           Case{2, 2, 333, 6, 384, 0},    // 12 queries: two groups, the second one partial
           Case{200, 1, 300, 6, 384, 0},  // one range a row, two blocks a multiprocessor (i8:
                                          // the queries' terms held in registers)
           Case{5, 1, 40, 1, 64, 1},      // the same at width 64
       }) {
    const std::string what =
        absl::StrCat("SharedKvAttention B=", c.batch, " Tq=", c.q_len, " Tk=", c.kv_len,
                     " H=", c.heads, " D=", c.width, " splits=", c.splits);
    SCOPED_TRACE(what);
    if (c.width > gpu_->shared_kv_max_width()) {  // (Ada's 99 KB a block: up to 384)
      std::cout << what << ": wider than this GPU's kernel (" << gpu_->shared_kv_max_width()
                << "), not run\n";
      continue;
    }
    // Both pipelines into f32, and the default one into f16 (the engine's output buffer where it
    // has f16 activations).
    // And with L2 hints (the first rows' keys evict-last, the others evict-first): the same
    // results, since hints only move lines in L2.
    // And over an i8 kv (QuantizeChannels' output on each side, the same integers and scales).
    struct Run {
      bool deep, out_f16;
      int64_t retain_bytes;
      bool int8 = false;
      int i8_stages = 0;  // CudaBackendOptions::shared_kv_i8_stages
    };
    const int64_t half_rows_bytes = (c.batch / 2) * c.kv_len * c.width * 2;
    for (const Run run : {Run{true, false, -1}, Run{false, false, -1}, Run{false, true, -1},
                          Run{false, false, half_rows_bytes}, Run{true, false, -1, true},
                          Run{false, false, -1, true}, Run{false, true, -1, true, 2}}) {
      const bool deep = run.deep;
      const std::string how =
          absl::StrCat(deep ? " deep" : " double-buffered", run.out_f16 ? " into f16" : " into f32",
                       " L2 retain bytes ", run.retain_bytes, run.int8 ? " i8 kv" : " f16 kv",
                       run.i8_stages > 0 ? absl::StrCat(" in ", run.i8_stages, " stages") : "");
      SCOPED_TRACE(how);
      CudaBackendOptions options;
      options.shared_kv_splits = c.splits;
      options.shared_kv_deep_pipeline = deep;
      options.shared_kv_l2_retain_bytes = run.retain_bytes;
      options.shared_kv_i8_stages = run.i8_stages;
      auto made = CreateCudaBackend(options);
      ASSERT_TRUE(made.ok()) << made.status();
      Backend* gpu = made->get();
      const int64_t width = c.heads * c.width;
      std::vector<float> kv = Random(c.batch * c.kv_len * c.width, -2.0f, 2.0f);
      std::vector<uint16_t> bits(kv.size());
      for (size_t i = 0; i < kv.size(); ++i) {
        if (run.int8 && i % static_cast<size_t>(c.width) % 7 == 0) kv[i] *= 20.0f;  // big channels
        bits[i] = FloatToHalf(kv[i]);
        if (!run.int8) kv[i] = HalfToFloat(bits[i]);  // the CPU reads the same values
      }
      const std::vector<float> q = Random(c.batch * c.q_len * width, -0.2f, 0.2f);
      auto gkv = Upload(*gpu, {c.batch, c.kv_len, c.width}, DType::kF16, bits.data());
      // The i8 form of kv and its scales on each side, from the same f32 values.
      Tensor gkv8, gscales, ckv8, cscales;
      if (run.int8) {
        auto gsource = Upload(*gpu, {c.batch, c.kv_len, c.width}, DType::kF32, kv.data());
        auto g8 = gpu->Allocate({c.batch, c.kv_len, c.width}, DType::kI8);
        auto gs = gpu->Allocate({c.batch, c.width}, DType::kF32);
        auto c8 = cpu_->Allocate({c.batch, c.kv_len, c.width}, DType::kI8);
        auto cs = cpu_->Allocate({c.batch, c.width}, DType::kF32);
        ASSERT_TRUE(gsource.ok() && g8.ok() && gs.ok() && c8.ok() && cs.ok());
        gkv8 = *g8, gscales = *gs, ckv8 = *c8, cscales = *cs;
        const Pair source = F32({c.batch, c.kv_len, c.width}, kv);
        ASSERT_TRUE(gpu->QuantizeChannels(*gsource, gkv8, gscales).ok());
        ASSERT_TRUE(cpu_->QuantizeChannels(source.cpu, ckv8, cscales).ok());
        auto got8 = Download<int8_t>(*gpu, gkv8);
        auto want8 = Download<int8_t>(*cpu_, ckv8);
        auto got_scales = Download<float>(*gpu, gscales);
        auto want_scales = Download<float>(*cpu_, cscales);
        ASSERT_TRUE(got8.ok() && want8.ok() && got_scales.ok() && want_scales.ok());
        ASSERT_EQ(*got8, *want8) << "QuantizeChannels' integers";
        ASSERT_EQ(*got_scales, *want_scales) << "QuantizeChannels' scales";
      }
      auto gq = Upload(*gpu, {c.batch, c.q_len, width}, DType::kF32, q.data());
      const int64_t out_count = c.batch * c.q_len * width;
      std::vector<float> nan(static_cast<size_t>(out_count), kNaN);
      std::vector<uint16_t> nan_half(static_cast<size_t>(out_count), 0x7e00);
      auto gout = run.out_f16
                      ? Upload(*gpu, {c.batch, c.q_len, width}, DType::kF16, nan_half.data())
                      : Upload(*gpu, {c.batch, c.q_len, width}, DType::kF32, nan.data());
      ASSERT_TRUE(gkv.ok() && gq.ok() && gout.ok());
      const Pair query = F32({c.batch, c.q_len, width}, q);
      const Pair keys = F32({c.batch, c.kv_len, c.width}, kv);
      const Pair out = Poisoned({c.batch, c.q_len, width});
      const float scale = 0.125f;
      const int heads = static_cast<int>(c.heads);
      ASSERT_TRUE(
          (run.int8 ? cpu_->SharedKvAttention(query.cpu, ckv8, &cscales, heads, scale, out.cpu)
                    : cpu_->SharedKvAttention(query.cpu, keys.cpu, nullptr, heads, scale, out.cpu))
              .ok());
      const absl::Status status =
          run.int8 ? gpu->SharedKvAttention(*gq, gkv8, &gscales, heads, scale, *gout)
                   : gpu->SharedKvAttention(*gq, *gkv, nullptr, heads, scale, *gout);
      ASSERT_TRUE(status.ok()) << status;
      // The queries and probabilities enter the tensor cores as f16 parts and rounding errors,
      // the keys are f16 on both sides: f32 arithmetic to the tensor cores' accumulation.
      if (!run.out_f16) {
        auto got = Download<float>(*gpu, *gout);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_TRUE(Close(what + how, *got, Cpu(out.cpu), kAccurateGemm));
        continue;
      }
      // Into f16: the CPU's result rounded to nearest f16. Where the two f32 results straddle a
      // rounding boundary they differ by one f16 step (2^-11 relative, rare: the attention
      // test into f16 measured up to 5.3e-5 over a whole output); truncating instead of
      // rounding would put ~2.8e-4 on it.
      auto got_bits = Download<uint16_t>(*gpu, *gout);
      ASSERT_TRUE(got_bits.ok()) << got_bits.status();
      std::vector<float> got(got_bits->size()), want = Cpu(out.cpu);
      for (size_t i = 0; i < got.size(); ++i) {
        got[i] = HalfToFloat((*got_bits)[i]);
        want[i] = HalfToFloat(FloatToHalf(want[i]));
      }
      EXPECT_TRUE(Close(what + how, got, want, 1.5e-4));
    }
  }
}

TEST_P(CudaParityTest, SharedKvAttentionRefusals) {
  if (!SharedKvVariant(GetParam())) GTEST_SKIP() << "run on the Fast variant only";
  const Pair q = F32({2, 1, 6 * 64}, Random(2 * 6 * 64));
  const Pair kv32 = F32({2, 10, 64}, Random(2 * 10 * 64));
  std::vector<float> kv_values = Random(2 * 10 * 64);
  const Tensor kv = HalfGpu({2, 10, 64}, kv_values);
  const Pair out = Poisoned({2, 1, 6 * 64});
  ASSERT_TRUE(gpu_->SharedKvAttention(q.gpu, kv, nullptr, 6, 0.125f, out.gpu).ok());
  // f32 keys: the contract allows them, this backend's kernel does not take them.
  EXPECT_EQ(gpu_->SharedKvAttention(q.gpu, kv32.gpu, nullptr, 6, 0.125f, out.gpu).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(gpu_->SharedKvAttention(q.gpu, kv, nullptr, 5, 0.125f, out.gpu).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->SharedKvAttention(q.gpu, kv, nullptr, 6, NAN, out.gpu).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->SharedKvAttention(q.gpu, kv, nullptr, 6, 0.125f, q.gpu).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->SharedKvAttention(q.cpu, kv, nullptr, 6, 0.125f, out.gpu).code(),
            absl::StatusCode::kInvalidArgument);  // a host tensor
  // An f16 q (an f16 out is taken: the parity test above).
  EXPECT_EQ(
      gpu_->SharedKvAttention(PoisonedHalf({2, 1, 6 * 64}), kv, nullptr, 6, 0.125f, out.gpu).code(),
      absl::StatusCode::kInvalidArgument);
  // i8 keys: QuantizeChannels' output with its scales, and nothing else.
  ASSERT_TRUE(gpu_->supports(Op::kQuantizeChannels));
  auto kv8 = gpu_->Allocate({2, 10, 64}, DType::kI8);
  ASSERT_TRUE(kv8.ok()) << kv8.status();
  const Pair scales = Poisoned({2, 64});
  ASSERT_TRUE(gpu_->QuantizeChannels(kv32.gpu, *kv8, scales.gpu).ok());
  ASSERT_TRUE(gpu_->SharedKvAttention(q.gpu, *kv8, &scales.gpu, 6, 0.125f, out.gpu).ok());
  EXPECT_EQ(gpu_->SharedKvAttention(q.gpu, *kv8, nullptr, 6, 0.125f, out.gpu).code(),
            absl::StatusCode::kInvalidArgument);  // no scales
  EXPECT_EQ(gpu_->SharedKvAttention(q.gpu, kv, &scales.gpu, 6, 0.125f, out.gpu).code(),
            absl::StatusCode::kInvalidArgument);  // scales for f16 keys
  EXPECT_EQ(gpu_->SharedKvAttention(q.gpu, *kv8, &scales.cpu, 6, 0.125f, out.gpu).code(),
            absl::StatusCode::kInvalidArgument);  // host scales
  EXPECT_EQ(gpu_->QuantizeChannels(kv, *kv8, scales.gpu).code(),
            absl::StatusCode::kInvalidArgument);  // f16 x
  EXPECT_EQ(gpu_->QuantizeChannels(kv32.cpu, *kv8, scales.gpu).code(),
            absl::StatusCode::kInvalidArgument);  // host x
  EXPECT_EQ(gpu_->QuantizeChannels(kv32.gpu, *kv8, Poisoned({2, 32}).gpu).code(),
            absl::StatusCode::kInvalidArgument);  // scales of another width
  ASSERT_TRUE(gpu_->Synchronize().ok());
}

TEST_P(CudaParityTest, CopyConvertsF32ToF16WithHalfActivations) {
  if (!SharedKvVariant(GetParam())) GTEST_SKIP() << "run on the Fast variant only";
  std::vector<float> values = Random(1000 * 3 + 7, -70000.0f, 70000.0f);
  values[0] = 1e-8f;  // an f16 subnormal
  values[1] = kNaN;
  const Pair src = F32({static_cast<int64_t>(values.size())}, values);
  const Tensor half = PoisonedHalf({static_cast<int64_t>(values.size())});
  ASSERT_TRUE(gpu_->Copy(src.gpu, half).ok());
  auto got = Download<uint16_t>(*gpu_, half);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(HalfToFloat((*got)[i]))) << i;
    } else {
      ASSERT_EQ((*got)[i], FloatToHalf(values[i])) << "element " << i << " = " << values[i];
    }
  }
  // f16 → f32 is not a conversion Copy makes; element counts must agree.
  const Pair f32_dst = Poisoned({static_cast<int64_t>(values.size())});
  EXPECT_EQ(gpu_->Copy(half, f32_dst.gpu).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->Copy(src.gpu, PoisonedHalf({5})).code(), absl::StatusCode::kInvalidArgument);
  // Without f16 activations, Copy keeps one dtype.
  CudaBackendOptions options;
  options.half_activations = false;
  auto plain = CreateCudaBackend(options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto t32 = Upload(**plain, {4}, DType::kF32, values.data());
  auto t16 = (*plain)->Allocate({4}, DType::kF16);
  ASSERT_TRUE(t32.ok() && t16.ok());
  EXPECT_EQ((*plain)->Copy(*t32, *t16).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*plain)->supports(Op::kSharedKvAttention));
  EXPECT_FALSE((*plain)->supports(Op::kQuantizeChannels));
}

// shared_kv_l2_retain_bytes sets L2 aside for the retained rows while a backend that asked for it
// lives (the largest ask of those alive, up to the device's maximum), and the last one to go puts
// the limit back. (No other backend is alive in this test: it makes its own.)
TEST(SharedKvL2SetAside, LastsWhileABackendThatAskedLives) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    GTEST_SKIP() << "no usable GPU, CUDA test skipped";
  }
  if (!cuda::SharedKvAttentionAvailable()) GTEST_SKIP() << "no tensor-core kernel in this build";
  int max_bytes = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&max_bytes, cudaDevAttrMaxPersistingL2CacheSize, 0),
            cudaSuccess);
  if (max_bytes <= 0) GTEST_SKIP() << "this GPU sets no L2 aside for persisting accesses";
  auto limit = [] {
    size_t bytes = 0;
    EXPECT_EQ(cudaDeviceGetLimit(&bytes, cudaLimitPersistingL2CacheSize), cudaSuccess);
    return bytes;
  };
  auto make = [](int64_t retain_bytes) {
    CudaBackendOptions options;
    options.shared_kv_l2_retain_bytes = retain_bytes;
    auto made = CreateCudaBackend(options);
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? std::move(*made) : nullptr;
  };
  const size_t before = limit();
  {
    auto none = make(-1);  // no hints: no set-aside
    EXPECT_EQ(limit(), before);
  }
  size_t small = 0;
  {
    auto first = make(int64_t{4} << 20);
    small = limit();
    EXPECT_GT(small, 0u);  // the driver rounds it to its granularity
    EXPECT_LE(small, static_cast<size_t>(max_bytes));
    {
      auto larger = make(int64_t{24} << 20);
      EXPECT_GE(limit(), small);
      auto smaller = make(int64_t{2} << 20);
      EXPECT_GE(limit(), small);  // a smaller ask does not lower it
    }
    EXPECT_GT(limit(), 0u);  // `first` still lives
  }
  EXPECT_EQ(limit(), before);
}

}  // namespace
}  // namespace waav
