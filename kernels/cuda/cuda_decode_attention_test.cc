// DecodeAttention (one query per row, head_dim 64: a decoder step's self- and cross-attention)
// on the CUDA backend against the CPU's Attention: f32 and f16 caches, rows whose keys are split
// over several blocks and rows that are not, head counts whose blocks end in a partial warp,
// lengths of zero, one, a partial pass and the whole cache; a length outside the cache reported
// with the other rows still written. The plan's rules are checked without a GPU.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_parity_fixture.h"
#include "kernels/cuda/decode_attention.cuh"

namespace waav {
namespace {

cuda::AttentionArgs DecodeArgs(int64_t batch, int64_t kv_len, int heads, bool half) {
  static float storage[4] = {};  // 16-byte aligned enough for the plan's pointer checks
  cuda::AttentionArgs a{};
  a.q = a.k = a.v = storage;
  a.batch = batch;
  a.q_len = 1;
  a.kv_len = kv_len;
  a.heads = heads;
  a.head_dim = 64;
  a.scale = 0.125f;
  if (half) {
    a.kv_half = true;
    a.k16 = a.v16 = storage;
  }
  return a;
}

TEST(DecodeAttentionPlan, TakesOneQueryOfHeadDim64AndSplitsFewRows) {
  constexpr int kSms = 132;
  // Whisper tiny's cross-attention at 16 rows: 6 heads of f16, 10 keys a pass (480 threads).
  cuda::DecodePlan p = cuda::PlanDecodeAttention(DecodeArgs(16, 1500, 6, true), kSms, 1 << 20);
  ASSERT_TRUE(p.supported);
  EXPECT_EQ(p.keys_per_pass, 10);
  EXPECT_EQ(p.threads, 480);
  EXPECT_EQ(p.splits, kSms / 16);  // about one block per multiprocessor
  EXPECT_EQ(cuda::PlanDecodeAttention(DecodeArgs(16, 1500, 6, true), kSms, 1 << 20, 2).splits,
            2 * kSms / 16);
  EXPECT_EQ(p.counters, 16);
  EXPECT_EQ(p.partial_bytes, size_t{16} * p.splits * (384 + 12) * sizeof(float));
  // Many rows fill the chip unsplit; f32 caches take 16 lanes a head.
  p = cuda::PlanDecodeAttention(DecodeArgs(256, 1500, 6, true), kSms, 1 << 20);
  EXPECT_TRUE(p.supported);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.partial_bytes, 0u);
  EXPECT_EQ(p.counters, 0);
  p = cuda::PlanDecodeAttention(DecodeArgs(4, 448, 6, false), kSms, 1 << 20);
  EXPECT_TRUE(p.supported);
  EXPECT_EQ(p.keys_per_pass, 5);
  EXPECT_EQ(p.threads, 480);
  // A range keeps at least two iterations of four passes (20 keys each): 448 keys, 11 ranges.
  EXPECT_EQ(p.splits, 448 / (2 * 4 * 5));
  // Short caches are not split; a partial last warp is rounded up (7 heads: 56 threads a key).
  p = cuda::PlanDecodeAttention(DecodeArgs(1, 30, 7, true), kSms, 1 << 20);
  EXPECT_TRUE(p.supported);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.keys_per_pass, 9);
  EXPECT_EQ(p.threads, 512);
  // Fewer keys a pass on request (96 threads), never more than 512 threads take.
  p = cuda::PlanDecodeAttention(DecodeArgs(16, 1500, 6, true), kSms, 1 << 20, 8, 2);
  EXPECT_EQ(p.keys_per_pass, 2);
  EXPECT_EQ(p.threads, 96);
  EXPECT_EQ(p.splits, 8 * kSms / 16);
  p = cuda::PlanDecodeAttention(DecodeArgs(16, 1500, 6, true), kSms, 1 << 20, 2, 50);
  EXPECT_EQ(p.keys_per_pass, 10);
  // More rows than counters: unsplit.
  p = cuda::PlanDecodeAttention(DecodeArgs(2, 1500, 6, true), kSms, 1);
  EXPECT_TRUE(p.supported);
  EXPECT_EQ(p.splits, 1);
  // Refused: several queries, another head size, f16 queries, too many heads, misaligned K.
  cuda::AttentionArgs a = DecodeArgs(2, 100, 6, true);
  a.q_len = 2;
  EXPECT_FALSE(cuda::PlanDecodeAttention(a, kSms, 1 << 20).supported);
  a = DecodeArgs(2, 100, 6, true);
  a.head_dim = 32;
  EXPECT_FALSE(cuda::PlanDecodeAttention(a, kSms, 1 << 20).supported);
  a = DecodeArgs(2, 100, 6, true);
  a.half_inputs = true;
  EXPECT_FALSE(cuda::PlanDecodeAttention(a, kSms, 1 << 20).supported);
  EXPECT_TRUE(cuda::PlanDecodeAttention(DecodeArgs(2, 100, 64, true), kSms, 1 << 20).supported);
  EXPECT_FALSE(cuda::PlanDecodeAttention(DecodeArgs(2, 100, 65, true), kSms, 1 << 20).supported);
  EXPECT_FALSE(cuda::PlanDecodeAttention(DecodeArgs(2, 100, 33, false), kSms, 1 << 20).supported);
  a = DecodeArgs(2, 100, 6, true);
  a.k16 = reinterpret_cast<const char*>(a.k16) + 4;
  EXPECT_FALSE(cuda::PlanDecodeAttention(a, kSms, 1 << 20).supported);
  EXPECT_FALSE(cuda::PlanDecodeAttention(DecodeArgs(0, 100, 6, true), kSms, 1 << 20).supported);
  EXPECT_FALSE(cuda::PlanDecodeAttention(DecodeArgs(2, 0, 6, true), kSms, 1 << 20).supported);
}

TEST_P(CudaParityTest, DecodeAttentionMatchesCpu) {
  if (!GetParam().decode_attention) GTEST_SKIP() << "DecodeAttention off in this variant";
  struct Case {
    int64_t batch, kv_len, heads;
    bool lengths;
  };
  for (const bool half : {false, true}) {
    for (const Case c : {
             Case{1, 1500, 6, false},   // cross-attention, keys split over many blocks
             Case{16, 1500, 6, false},  // split in 16
             Case{64, 1500, 6, true},   // split in 4, lengths
             Case{40, 60, 6, false},    // unsplit (too few keys to split)
             Case{5, 448, 6, true},     // self-attention: lengths from 0 to the whole cache
             Case{3, 7, 6, true},       // fewer keys than one pass
             Case{2, 333, 7, true},     // a partial last warp
             Case{3, 200, 20, false},   // large-v3's heads: 3 keys a pass
             Case{2, 90, 1, true},      // one head
             Case{2, 40, 32, false},    // 32 heads: one key a pass in f32
         }) {
      const std::string what =
          absl::StrCat("DecodeAttention ", half ? "f16" : "f32", " K/V B=", c.batch,
                       " Tk=", c.kv_len, " H=", c.heads, c.lengths ? " lengths" : "");
      SCOPED_TRACE(what);
      const int64_t width = c.heads * 64;
      std::vector<float> kv = Random(c.batch * c.kv_len * width, -2.0f, 2.0f);
      std::vector<float> vv = Random(c.batch * c.kv_len * width);
      const Pair query = F32({c.batch, 1, width}, Random(c.batch * width, -2.0f, 2.0f));
      Tensor key_gpu, value_gpu;
      if (half) {
        key_gpu = HalfGpu({c.batch, c.kv_len, width}, kv);  // rounds kv, vv for the CPU too
        value_gpu = HalfGpu({c.batch, c.kv_len, width}, vv);
      }
      const Pair k = F32({c.batch, c.kv_len, width}, kv);
      const Pair v = F32({c.batch, c.kv_len, width}, vv);
      if (!half) {
        key_gpu = k.gpu;
        value_gpu = v.gpu;
      }
      std::vector<int32_t> lengths(static_cast<size_t>(c.batch));
      for (int32_t& l : lengths) l = RandomInt(0, static_cast<int>(c.kv_len));
      if (c.batch > 2) {
        lengths[0] = static_cast<int32_t>(c.kv_len);
        lengths[1] = 0;  // sees nothing: zeros
        lengths[2] = 1;
      }
      const Pair len = I32({c.batch}, lengths);
      const Pair out = Poisoned({c.batch, 1, width});
      const float scale = 0.125f;
      const bool causal = c.lengths && c.batch % 2 == 1;  // changes nothing for one query
      ASSERT_TRUE(cpu_->Attention(query.cpu, k.cpu, v.cpu, c.lengths ? &len.cpu : nullptr,
                                  static_cast<int>(c.heads), scale, causal, out.cpu)
                      .ok());
      const absl::Status status =
          gpu_->Attention(query.gpu, key_gpu, value_gpu, c.lengths ? &len.gpu : nullptr,
                          static_cast<int>(c.heads), scale, causal, out.gpu);
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_TRUE(Close(what, Gpu(out.gpu), Cpu(out.cpu), kExact));
    }
  }
}

// A length outside [0, Tk] is reported through Synchronize; that row is left as it was and the
// others are attended (split and unsplit plans).
TEST_P(CudaParityTest, DecodeAttentionReportsBadLengthsAndWritesTheOtherRows) {
  if (!GetParam().decode_attention) GTEST_SKIP() << "DecodeAttention off in this variant";
  const int64_t batch = 3, width = 384;
  for (const int64_t kv_len : {int64_t{1500}, int64_t{60}}) {  // split, unsplit
    for (const int32_t bad : {-1, static_cast<int32_t>(kv_len) + 1}) {
      SCOPED_TRACE(absl::StrCat("Tk ", kv_len, ", bad length ", bad));
      const Pair q = F32({batch, 1, width}, Random(batch * width));
      const Pair k = F32({batch, kv_len, width}, Random(batch * kv_len * width));
      const Pair v = F32({batch, kv_len, width}, Random(batch * kv_len * width));
      std::vector<int32_t> lengths(static_cast<size_t>(batch), static_cast<int32_t>(kv_len / 2));
      lengths[1] = bad;
      const Pair len = I32({batch}, lengths);
      const Pair want = Poisoned({batch, 1, width});
      const Pair got = Poisoned({batch, 1, width});
      std::vector<int32_t> fixed = lengths;
      fixed[1] = 0;
      const Pair good = I32({batch}, fixed);
      ASSERT_TRUE(cpu_->Attention(q.cpu, k.cpu, v.cpu, &good.cpu, 6, 0.125f, false, want.cpu).ok());
      ASSERT_TRUE(gpu_->Attention(q.gpu, k.gpu, v.gpu, &len.gpu, 6, 0.125f, false, got.gpu).ok());
      const absl::Status status = gpu_->Synchronize();
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_NE(std::string(status.message()).find(absl::StrCat("kv_lengths[1] = ", bad)),
                std::string::npos)
          << status;
      std::vector<float> g = Gpu(got.gpu), w = Cpu(want.cpu);
      ASSERT_EQ(g.size(), w.size());
      for (int64_t i = 0; i < width; ++i) {
        EXPECT_TRUE(std::isnan(g[static_cast<size_t>(width + i)])) << "row 1 written at " << i;
        g[static_cast<size_t>(width + i)] = w[static_cast<size_t>(width + i)] = 0.0f;
      }
      EXPECT_TRUE(Close("the other rows", g, w, kExact));
    }
  }
}

// The kernel's options (K/V evict-first in L2, other key splits, fewer keys a pass) and
// SplitAttention in its place give the CPU's results too, f16 and f32 caches. (Once, on the
// FastDecodeAttention variant.)
TEST_P(CudaParityTest, DecodeAttentionOptionsMatchCpu) {
  if (!GetParam().decode_attention) GTEST_SKIP() << "run on FastDecodeAttention only";
  struct Knobs {
    const char* name;
    bool decode, evict_first;
    int blocks_per_sm, keys_per_pass = 0;
  };
  for (const Knobs knobs :
       {Knobs{"evict-first", true, true, 2}, Knobs{"1 block/SM", true, false, 1},
        Knobs{"8 blocks/SM", true, true, 8}, Knobs{"2 keys a pass", true, false, 8, 2},
        Knobs{"SplitAttention", false, false, 2}}) {
    CudaBackendOptions options;
    options.decode_attention = knobs.decode;
    options.decode_attention_evict_first = knobs.evict_first;
    options.decode_attention_blocks_per_sm = knobs.blocks_per_sm;
    options.decode_attention_keys_per_pass = knobs.keys_per_pass;
    auto made = CreateCudaBackend(options);
    ASSERT_TRUE(made.ok()) << made.status();
    Backend& gpu = **made;
    for (const bool half : {false, true}) {
      const int64_t batch = 12, kv_len = 1500, width = 384;
      const std::string what = absl::StrCat("DecodeAttention ", knobs.name, half ? " f16" : " f32",
                                            " K/V B=", batch, " Tk=", kv_len);
      SCOPED_TRACE(what);
      std::vector<float> q = Random(batch * width, -2.0f, 2.0f);
      std::vector<float> kv = Random(batch * kv_len * width, -2.0f, 2.0f);
      std::vector<float> vv = Random(batch * kv_len * width);
      std::vector<int32_t> lengths(static_cast<size_t>(batch));
      for (int32_t& l : lengths) l = RandomInt(0, static_cast<int>(kv_len));
      auto upload_kv = [&](std::vector<float>& values) {
        if (!half) return Upload(gpu, {batch, kv_len, width}, DType::kF32, values.data());
        std::vector<uint16_t> bits(values.size());
        for (size_t i = 0; i < values.size(); ++i) {
          bits[i] = FloatToHalf(values[i]);
          values[i] = HalfToFloat(bits[i]);  // the CPU reads the same values
        }
        return Upload(gpu, {batch, kv_len, width}, DType::kF16, bits.data());
      };
      auto gk = upload_kv(kv), gv = upload_kv(vv);
      auto gq = Upload(gpu, {batch, 1, width}, DType::kF32, q.data());
      auto glen = Upload(gpu, {batch}, DType::kI32, lengths.data());
      auto gout = gpu.Allocate({batch, 1, width}, DType::kF32);
      ASSERT_TRUE(gk.ok() && gv.ok() && gq.ok() && glen.ok() && gout.ok());
      const Pair k = F32({batch, kv_len, width}, kv), v = F32({batch, kv_len, width}, vv);
      const Pair query = F32({batch, 1, width}, q), len = I32({batch}, lengths);
      const Pair out = Poisoned({batch, 1, width});
      ASSERT_TRUE(
          cpu_->Attention(query.cpu, k.cpu, v.cpu, &len.cpu, 6, 0.125f, false, out.cpu).ok());
      const absl::Status status = gpu.Attention(*gq, *gk, *gv, &*glen, 6, 0.125f, false, *gout);
      ASSERT_TRUE(status.ok()) << status;
      auto got = Download<float>(gpu, *gout);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(Close(what, *got, Cpu(out.cpu), kExact));
    }
  }
}

}  // namespace
}  // namespace waav
