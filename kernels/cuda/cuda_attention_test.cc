// Attention (flash v1 and v2, SplitAttention, DecodeAttention as the backend chooses) against
// the CPU backend's on fresh random inputs: f32 and f16 inputs (the encoder's f16 planes), an f32
// q over f16 K/V caches (the decoder's cross-attention and prompts), f16 outputs, causal masks
// and per-row key lengths, Whisper's shapes and odd head sizes. (Moved out of
// cuda_backend_test.cc, which holds the other ops.)
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_parity_fixture.h"

namespace waav {
namespace {

TEST_P(CudaParityTest, AttentionWithHalfInputsMatchesCpu) {
  if (!half_activations_) GTEST_SKIP() << "f16 activations off in this variant";
  struct Case {
    int64_t batch, q_len, kv_len, heads, head_dim;
  };
  // Flash v2 reads f16 q, k, v as they are; the others (odd heads, accurate) widen them first.
  for (const Case c : {Case{1, 1500, 1500, 6, 64}, Case{2, 300, 300, 6, 64},
                       Case{1, 1500, 70, 6, 64}, Case{2, 5, 33, 3, 24}}) {
    const std::string what = absl::StrCat("Attention f16 q, k, v B=", c.batch, " Tq=", c.q_len,
                                          " Tk=", c.kv_len, " H=", c.heads, " D=", c.head_dim);
    SCOPED_TRACE(what);
    const int64_t width = c.heads * c.head_dim;
    std::vector<float> qv = Random(c.batch * c.q_len * width, -2.0f, 2.0f);
    std::vector<float> kv = Random(c.batch * c.kv_len * width, -2.0f, 2.0f);
    std::vector<float> vv = Random(c.batch * c.kv_len * width);
    const Tensor q16 = HalfGpu({c.batch, c.q_len, width}, qv);
    const Tensor k16 = HalfGpu({c.batch, c.kv_len, width}, kv);
    const Tensor v16 = HalfGpu({c.batch, c.kv_len, width}, vv);
    const Pair q = F32({c.batch, c.q_len, width}, qv);
    const Pair k = F32({c.batch, c.kv_len, width}, kv);
    const Pair v = F32({c.batch, c.kv_len, width}, vv);
    const Pair out = Poisoned({c.batch, c.q_len, width});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ASSERT_TRUE(cpu_->Attention(q.cpu, k.cpu, v.cpu, nullptr, static_cast<int>(c.heads), scale,
                                false, out.cpu)
                    .ok());
    const absl::Status status =
        gpu_->Attention(q16, k16, v16, nullptr, static_cast<int>(c.heads), scale, false, out.gpu);
    ASSERT_TRUE(status.ok()) << status;
    const bool tensor_cores = fast() && c.head_dim == 64 && c.q_len >= 16;
    EXPECT_TRUE(Close(what, Gpu(out.gpu), Cpu(out.cpu), tensor_cores ? kFastAttention : kExact));
  }
  // Mixed dtypes are refused.
  std::vector<float> a = Random(2 * 16 * 64);
  const Tensor q16 = HalfGpu({2, 16, 64}, a);
  const Pair k = F32({2, 16, 64}, a);
  const Pair out = Poisoned({2, 16, 64});
  EXPECT_EQ(gpu_->Attention(q16, k.gpu, k.gpu, nullptr, 1, 0.125f, false, out.gpu).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(CudaParityTest, AttentionMatchesCpu) {
  struct Case {
    int64_t batch, q_len, kv_len, heads, head_dim;
    bool causal, lengths;
  };
  for (const Case c :
       {Case{4, 1, 448, 6, 64, true, true},     // decoder self-attention
        Case{2, 3, 448, 6, 64, true, true},     // prompt
        Case{1, 1, 1500, 6, 64, false, false},  // cross-attention
        Case{3, 1, 1500, 6, 64, false, false},
        Case{1, 300, 300, 6, 64, false, false},  // encoder-like
        Case{2, 100, 120, 6, 64, true, true}, Case{1, 1500, 1500, 6, 64, false, false},
        Case{1, 64, 1024, 2, 64, true, true},     // f16 path with key splits
        Case{2, 1500, 1500, 6, 64, false, true},  // split v2 kernel, a row that sees nothing
        Case{1, 200, 1500, 6, 64, true, true}, Case{1, 1500, 70, 6, 64, false, false},
        Case{2, 5, 33, 3, 24, true, true},  // odd head sizes
        Case{1, 20, 50, 2, 128, false, false}, Case{1, 2, 40, 1, 200, false, true}}) {
    const std::string what =
        absl::StrCat("Attention B=", c.batch, " Tq=", c.q_len, " Tk=", c.kv_len, " H=", c.heads,
                     " D=", c.head_dim, c.causal ? " causal" : "", c.lengths ? " lengths" : "");
    SCOPED_TRACE(what);
    const int64_t width = c.heads * c.head_dim;
    const Pair q = F32({c.batch, c.q_len, width}, Random(c.batch * c.q_len * width, -2.0f, 2.0f));
    const Pair k = F32({c.batch, c.kv_len, width}, Random(c.batch * c.kv_len * width, -2.0f, 2.0f));
    const Pair v = F32({c.batch, c.kv_len, width}, Random(c.batch * c.kv_len * width));
    std::vector<int32_t> lengths(c.batch);
    for (int32_t& l : lengths) l = RandomInt(0, static_cast<int>(c.kv_len));
    if (c.lengths && c.batch > 1) lengths[1] = 0;  // a row that sees nothing outputs zeros
    const Pair len = I32({c.batch}, lengths);
    const Pair out = Poisoned({c.batch, c.q_len, width});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ASSERT_TRUE(cpu_->Attention(q.cpu, k.cpu, v.cpu, c.lengths ? &len.cpu : nullptr,
                                static_cast<int>(c.heads), scale, c.causal, out.cpu)
                    .ok());
    ASSERT_TRUE(gpu_->Attention(q.gpu, k.gpu, v.gpu, c.lengths ? &len.gpu : nullptr,
                                static_cast<int>(c.heads), scale, c.causal, out.gpu)
                    .ok());
    const bool tensor_cores = fast() && c.head_dim == 64 && c.q_len >= 16;
    EXPECT_TRUE(Close(what, Gpu(out.gpu), Cpu(out.cpu), tensor_cores ? kFastAttention : kExact));
  }
}

// An f32 q over an f16 K/V cache (the decoder's cross-attention with f16 activations):
// SplitAttention widens K and V as it loads them (one query; every query where not kFast), Flash
// v2 takes q and the probabilities as f16 hi + lo parts (prompts); the CPU attends over the same
// (widened) values in f32, so the results agree to f32 rounding (kExact).
// An f16 out (f16 activations): SplitAttention (a decoder step's one query over f32 or f16
// caches) and Flash v2 (many queries: f32 q, f16 q, k, v as the encoder's planes, its one
// launch and its key splits merged) round as they store, the other kernels (flash v1,
// DecodeAttention in its variant) write f32 scratch and convert; each against the CPU's result
// rounded to f16.
TEST_P(CudaParityTest, AttentionIntoHalfMatchesCpuRounded) {
  if (!half_activations_) GTEST_SKIP() << "f16 activations off in this variant";
  struct Case {
    int64_t batch, q_len, kv_len;
    bool causal, half_kv, half_q = false;
  };
  for (const Case c :
       {Case{16, 1, 64, true, false}, Case{5, 1, 448, true, true}, Case{3, 1, 1500, false, true},
        Case{1, 64, 200, true, false}, Case{2, 20, 1500, false, true},
        Case{4, 100, 100, false, true, true}, Case{1, 1500, 1500, false, true, true}}) {
    const int64_t heads = 6, head_dim = 64, width = heads * head_dim;
    const std::string what =
        absl::StrCat("Attention into f16 B=", c.batch, " Tq=", c.q_len, " Tk=", c.kv_len,
                     c.half_q ? " f16 q, k, v" : (c.half_kv ? " f16 k, v" : ""));
    SCOPED_TRACE(what);
    // f16 inputs: rounded first, so that the CPU reads the same values.
    auto input = [&](const Shape& shape, std::vector<float> values, bool half) {
      if (!half) return F32(shape, values);
      const Tensor gpu = HalfGpu(shape, values);
      return Pair{F32(shape, values).cpu, gpu};
    };
    const Pair q =
        input({c.batch, c.q_len, width}, Random(c.batch * c.q_len * width, -2.0f, 2.0f), c.half_q);
    const Shape kv_shape{c.batch, c.kv_len, width};
    const Pair k = input(kv_shape, Random(c.batch * c.kv_len * width, -2.0f, 2.0f), c.half_kv);
    const Pair v = input(kv_shape, Random(c.batch * c.kv_len * width), c.half_kv);
    const Pair out = Poisoned({c.batch, c.q_len, width});
    const Tensor out16 = PoisonedHalf({c.batch, c.q_len, width});
    const float scale = 0.125f;
    ASSERT_TRUE(cpu_->Attention(q.cpu, k.cpu, v.cpu, nullptr, static_cast<int>(heads), scale,
                                c.causal, out.cpu)
                    .ok());
    ASSERT_TRUE(gpu_->Attention(q.gpu, k.gpu, v.gpu, nullptr, static_cast<int>(heads), scale,
                                c.causal, out16)
                    .ok());
    auto bits = Download<uint16_t>(*gpu_, out16);
    ASSERT_TRUE(bits.ok()) << bits.status();
    std::vector<float> got(bits->size()), want = Cpu(out.cpu);
    for (size_t i = 0; i < got.size(); ++i) {
      got[i] = HalfToFloat((*bits)[i]);
      want[i] = HalfToFloat(FloatToHalf(want[i]));
    }
    // The f32 results agree to ~1e-6 (kFastAttention with tensor cores); rounding then differs
    // by one f16 step (2^-11 relative) where they straddle a boundary: measured up to 5.3e-5
    // over the whole output. Truncating instead of rounding would put ~2.8e-4 on it.
    const bool tensor_cores = fast() && c.q_len >= 16;
    EXPECT_TRUE(Close(what, got, want, tensor_cores ? kFastAttention : 1.5e-4));
  }
}

TEST_P(CudaParityTest, AttentionOverHalfKvCacheMatchesCpu) {
  std::vector<float> a = Random(2 * 16 * 64);
  const Pair q = F32({2, 16, 64}, a);
  const Tensor k16 = HalfGpu({2, 16, 64}, a);
  const Pair out = Poisoned({2, 16, 64});
  if (!half_activations_) {
    EXPECT_EQ(gpu_->Attention(q.gpu, k16, k16, nullptr, 1, 0.125f, false, out.gpu).code(),
              absl::StatusCode::kInvalidArgument);
    GTEST_SKIP() << "f16 activations off in this variant: f16 K/V refused";
  }
  // K and V of one dtype.
  EXPECT_EQ(gpu_->Attention(q.gpu, k16, q.gpu, nullptr, 1, 0.125f, false, out.gpu).code(),
            absl::StatusCode::kInvalidArgument);
  struct Case {
    int64_t batch, q_len, kv_len, heads, head_dim;
    bool causal, lengths;
  };
  for (const Case c :
       {Case{1, 1, 1500, 6, 64, false, false},  // cross-attention step
        Case{8, 1, 1500, 6, 64, false, false}, Case{64, 1, 1500, 6, 64, false, false},
        Case{3, 7, 1500, 6, 64, false, false},  // prompts over the cross cache (kFast: Flash v2)
        Case{64, 2, 1500, 6, 64, false, false}, Case{3, 40, 1500, 6, 64, false, false},
        Case{2, 130, 1500, 6, 64, false, true}, Case{2, 20, 448, 6, 64, true, true},
        Case{4, 1, 448, 6, 64, true, true},    // a self cache in f16
        Case{2, 5, 33, 3, 24, true, true},     // odd heads: 8-byte loads
        Case{2, 4, 30, 2, 6, false, true}}) {  // scalar path (D % 4 != 0)
    const std::string what = absl::StrCat("Attention f32 q, f16 k, v B=", c.batch, " Tq=", c.q_len,
                                          " Tk=", c.kv_len, " H=", c.heads, " D=", c.head_dim,
                                          c.causal ? " causal" : "", c.lengths ? " lengths" : "");
    SCOPED_TRACE(what);
    const int64_t width = c.heads * c.head_dim;
    std::vector<float> kv = Random(c.batch * c.kv_len * width, -2.0f, 2.0f);
    std::vector<float> vv = Random(c.batch * c.kv_len * width);
    const Tensor key16 = HalfGpu({c.batch, c.kv_len, width}, kv);    // rounds kv and vv: the CPU
    const Tensor value16 = HalfGpu({c.batch, c.kv_len, width}, vv);  // sees the same values
    const Pair query = F32({c.batch, c.q_len, width}, Random(c.batch * c.q_len * width, -2, 2));
    const Pair k = F32({c.batch, c.kv_len, width}, kv);
    const Pair v = F32({c.batch, c.kv_len, width}, vv);
    std::vector<int32_t> lengths(static_cast<size_t>(c.batch));
    for (int32_t& l : lengths) l = RandomInt(static_cast<int>(c.q_len), static_cast<int>(c.kv_len));
    const Pair len = I32({c.batch}, lengths);
    const Pair o = Poisoned({c.batch, c.q_len, width});
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ASSERT_TRUE(cpu_->Attention(query.cpu, k.cpu, v.cpu, c.lengths ? &len.cpu : nullptr,
                                static_cast<int>(c.heads), scale, c.causal, o.cpu)
                    .ok());
    const absl::Status status =
        gpu_->Attention(query.gpu, key16, value16, c.lengths ? &len.gpu : nullptr,
                        static_cast<int>(c.heads), scale, c.causal, o.gpu);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_TRUE(Close(what, Gpu(o.gpu), Cpu(o.cpu), kExact));
  }
}

}  // namespace
}  // namespace waav
