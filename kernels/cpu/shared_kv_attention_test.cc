// Backend::SharedKvAttention on the CPU against a double-precision reference on fresh random
// inputs (tolerance: relative L2 error 1e-5, as every CPU kernel), with f32 and with i8 kv;
// Backend::QuantizeChannels against its definition; and both ops' refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/kernel_test_util.h"

namespace waav {
namespace {

using testing::Close;

class SharedKvAttentionTest : public testing::KernelTest {
 protected:
  void SetUp() override { backend_ = CreateCpuBackend({.num_threads = 2}); }
};

// out[b, t, h] = Σ_j softmax_j(scale · q[b, t, h]·kv[b, j]) kv[b, j], in double.
std::vector<double> Reference(const std::vector<float>& q, const std::vector<float>& kv,
                              int64_t batch, int64_t tq, int64_t tk, int64_t heads, int64_t width,
                              double scale) {
  std::vector<double> out(static_cast<size_t>(batch * tq * heads * width));
  std::vector<double> p(static_cast<size_t>(tk));
  for (int64_t r = 0; r < batch * tq * heads; ++r) {
    const int64_t b = r / (tq * heads);
    const float* qr = q.data() + r * width;
    const float* kvb = kv.data() + b * tk * width;
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < tk; ++j) {
      double s = 0;
      for (int64_t d = 0; d < width; ++d) s += double(qr[d]) * kvb[j * width + d];
      p[static_cast<size_t>(j)] = s * scale;
      max = std::max(max, s * scale);
    }
    for (double& x : p) sum += (x = std::exp(x - max));
    for (int64_t d = 0; d < width; ++d) {
      double acc = 0;
      for (int64_t j = 0; j < tk; ++j) acc += p[static_cast<size_t>(j)] * kvb[j * width + d];
      out[static_cast<size_t>(r * width + d)] = acc / sum;
    }
  }
  return out;
}

TEST_F(SharedKvAttentionTest, MatchesReference) {
  struct Case {
    int64_t batch, tq, tk, heads, width;
  };
  const Case cases[] = {
      {1, 1, 1500, 6, 384},  // Whisper tiny's absorbed cross-attention, one step
      {3, 1, 77, 6, 384},    // a few rows, keys not a multiple of any tile
      {2, 1, 1, 8, 512},     // Whisper base's width, one key
      {2, 3, 50, 2, 64},     // several queries per row
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(
        absl::StrCat("B=", c.batch, " Tq=", c.tq, " Tk=", c.tk, " H=", c.heads, " D=", c.width));
    const std::vector<float> q = Random(c.batch * c.tq * c.heads * c.width, -0.3f, 0.3f);
    const std::vector<float> kv = Random(c.batch * c.tk * c.width);
    const float scale = 0.9f;
    Tensor out = Poisoned({c.batch, c.tq, c.heads * c.width});
    ASSERT_TRUE(backend_
                    ->SharedKvAttention(F32({c.batch, c.tq, c.heads * c.width}, q),
                                        F32({c.batch, c.tk, c.width}, kv), nullptr,
                                        static_cast<int>(c.heads), scale, out)
                    .ok());
    EXPECT_TRUE(Close(Read(out), Reference(q, kv, c.batch, c.tq, c.tk, c.heads, c.width, scale)));
  }
}

TEST_F(SharedKvAttentionTest, RefusesWhatItsContractExcludes) {
  const Tensor q = F32({2, 1, 6 * 64}, Random(2 * 6 * 64));
  const Tensor kv = F32({2, 10, 64}, Random(2 * 10 * 64));
  const Tensor out = Poisoned({2, 1, 6 * 64});
  const auto refused = [&](const Tensor& q_in, const Tensor& kv_in, int heads, float scale,
                           const Tensor& out_in, const std::string& what) {
    const absl::Status s = backend_->SharedKvAttention(q_in, kv_in, nullptr, heads, scale, out_in);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
    EXPECT_NE(s.message().find("SharedKvAttention"), std::string::npos) << s;
  };
  ASSERT_TRUE(backend_->SharedKvAttention(q, kv, nullptr, 6, 0.125f, out).ok());
  refused(q, kv, 5, 0.125f, out, "heads that do not make q's width");
  refused(q, kv, 0, 0.125f, out, "no heads");
  refused(q, F32({1, 10, 64}, Random(640)), 6, 0.125f, out, "kv of another batch");
  refused(F32({2, 1, 6 * 48}, Random(2 * 6 * 48)), F32({2, 10, 48}, Random(2 * 10 * 48)), 6, 0.125f,
          Poisoned({2, 1, 6 * 48}), "a width that is not a multiple of 64");
  refused(F32({1, 1, 576}, Random(576)), F32({1, 4, 576}, Random(4 * 576)), 1, 0.125f,
          Poisoned({1, 1, 576}), "a width above kMaxSharedKvWidth");
  refused(q, F32({2, 0, 64}, {}), 6, 0.125f, out, "no keys");
  refused(q, kv, 6, std::numeric_limits<float>::infinity(), out, "a scale that is not finite");
  refused(q, kv, 6, 0.125f, Poisoned({2, 2, 6 * 64}), "out of another shape");
  refused(q, kv, 6, 0.125f, q, "out over q");
  refused(I32({2, 1, 6 * 64}, std::vector<int32_t>(2 * 6 * 64)), kv, 6, 0.125f, out, "i32 q");
  refused(q, F32({2, 10 * 64}, Random(2 * 10 * 64)), 6, 0.125f, out, "kv of rank 2");
  refused(q, Tensor(), 6, 0.125f, out, "no kv");
  // f16 out needs Op::kHalfActivations, which this backend does not offer.
  const absl::StatusOr<Tensor> half_out = backend_->Allocate({2, 1, 6 * 64}, DType::kF16);
  ASSERT_TRUE(half_out.ok()) << half_out.status();
  refused(q, kv, 6, 0.125f, *half_out, "f16 out without f16 activations");
}

// QuantizeChannels' integers and scales as the contract defines them, computed here.
struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> scales;
};
Quantized QuantizeReference(const std::vector<float>& x, int64_t batch, int64_t rows,
                            int64_t channels) {
  Quantized r{std::vector<int8_t>(x.size()), std::vector<float>(batch * channels, 0.0f)};
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < channels; ++c) {
      float max = 0;
      for (int64_t t = 0; t < rows; ++t) {
        max = std::max(max, std::fabs(x[static_cast<size_t>((b * rows + t) * channels + c)]));
      }
      const float scale = max / 127.0f;
      r.scales[static_cast<size_t>(b * channels + c)] = scale;
      for (int64_t t = 0; t < rows; ++t) {
        const size_t i = static_cast<size_t>((b * rows + t) * channels + c);
        const float steps = scale > 0 ? std::nearbyint(x[i] / scale) : 0.0f;
        r.q[i] = static_cast<int8_t>(std::clamp(steps, -127.0f, 127.0f));
      }
    }
  }
  return r;
}

// Channels of very different magnitudes (Whisper's encoder output has a few large ones), one
// all zero.
std::vector<float> ChannelScaled(std::vector<float> x, int64_t channels) {
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t c = static_cast<int64_t>(i) % channels;
    x[i] *= c == 1 ? 0.0f : (c % 7 == 0 ? 40.0f : 1.0f + 0.1f * static_cast<float>(c % 5));
  }
  return x;
}

Tensor I8(Backend& backend, const Shape& shape, const std::vector<int8_t>& values) {
  absl::StatusOr<Tensor> t = backend.Allocate(shape, DType::kI8);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return Tensor();
  EXPECT_TRUE(backend.CopyFromHost(values.data(), values.size(), *t).ok());
  return *t;
}

TEST_F(SharedKvAttentionTest, QuantizeChannelsMatchesItsDefinition) {
  const int64_t batch = 3, rows = 77, channels = 70;
  const std::vector<float> x =
      ChannelScaled(Random(batch * rows * channels, -2.0f, 2.0f), channels);
  const absl::StatusOr<Tensor> q = backend_->Allocate({batch, rows, channels}, DType::kI8);
  ASSERT_TRUE(q.ok()) << q.status();
  const Tensor scales = Poisoned({batch, channels});
  ASSERT_TRUE(backend_->QuantizeChannels(F32({batch, rows, channels}, x), *q, scales).ok());
  std::vector<int8_t> got(x.size());
  ASSERT_TRUE(backend_->CopyToHost(*q, got.data(), got.size()).ok());
  const Quantized want = QuantizeReference(x, batch, rows, channels);
  EXPECT_EQ(got, want.q);
  const std::vector<float> got_scales = Read(scales);
  EXPECT_EQ(got_scales, want.scales);
  // Every value within half a step of its channel; each channel's largest reaches ±127.
  for (size_t i = 0; i < x.size(); ++i) {
    const float scale = want.scales[(i / (rows * channels)) * channels + i % channels];
    EXPECT_LE(std::fabs(got[i] * scale - x[i]), 0.5f * scale * (1 + 1e-5f) + 1e-30f) << i;
  }
  EXPECT_EQ(got_scales[1], 0.0f);  // the zero channel: scale 0, integers 0
}

TEST_F(SharedKvAttentionTest, QuantizedKvMatchesReferenceOverItsValues) {
  const int64_t batch = 2, tq = 1, tk = 300, heads = 6, width = 384;
  const std::vector<float> source = ChannelScaled(Random(batch * tk * width, -1.0f, 1.0f), width);
  const Quantized kv = QuantizeReference(source, batch, tk, width);
  std::vector<float> widened(source.size());
  for (size_t i = 0; i < widened.size(); ++i) {
    widened[i] = kv.q[i] * kv.scales[(i / (tk * width)) * width + i % width];
  }
  const std::vector<float> q = Random(batch * tq * heads * width, -0.3f, 0.3f);
  const Tensor out = Poisoned({batch, tq, heads * width});
  const Tensor scales = F32({batch, width}, kv.scales);
  ASSERT_TRUE(backend_
                  ->SharedKvAttention(F32({batch, tq, heads * width}, q),
                                      I8(*backend_, {batch, tk, width}, kv.q), &scales,
                                      static_cast<int>(heads), 0.125f, out)
                  .ok());
  EXPECT_TRUE(Close(Read(out), Reference(q, widened, batch, tq, tk, heads, width, 0.125f)));
}

TEST_F(SharedKvAttentionTest, RefusesWrongQuantizedInputs) {
  const Tensor q = F32({2, 1, 6 * 64}, Random(2 * 6 * 64));
  const Tensor kv32 = F32({2, 10, 64}, Random(2 * 10 * 64));
  const Tensor kv8 = I8(*backend_, {2, 10, 64}, std::vector<int8_t>(2 * 10 * 64, 3));
  const Tensor scales = F32({2, 64}, Random(2 * 64, 0.0f, 1.0f));
  const Tensor out = Poisoned({2, 1, 6 * 64});
  const auto refused = [&](const Tensor& kv, const Tensor* kv_scales, const std::string& what) {
    const absl::Status s = backend_->SharedKvAttention(q, kv, kv_scales, 6, 0.125f, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
  };
  ASSERT_TRUE(backend_->SharedKvAttention(q, kv8, &scales, 6, 0.125f, out).ok());
  refused(kv8, nullptr, "i8 kv without scales");
  refused(kv32, &scales, "scales for an f32 kv");
  const Tensor short_scales = F32({2, 32}, Random(64));
  refused(kv8, &short_scales, "scales of another width");
  const Tensor int_scales = I32({2, 64}, std::vector<int32_t>(128, 1));
  refused(kv8, &int_scales, "i32 scales");
  const Tensor flat_scales = F32({128}, Random(128));
  refused(kv8, &flat_scales, "scales of rank 1");

  const Tensor x = F32({2, 10, 64}, Random(2 * 10 * 64));
  const auto quantize_refused = [&](const Tensor& in, const Tensor& q8, const Tensor& s8,
                                    const std::string& what) {
    const absl::Status s = backend_->QuantizeChannels(in, q8, s8);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
    EXPECT_NE(s.message().find("QuantizeChannels"), std::string::npos) << s;
  };
  const Tensor q8 = I8(*backend_, {2, 10, 64}, std::vector<int8_t>(2 * 10 * 64));
  const Tensor s8 = Poisoned({2, 64});
  ASSERT_TRUE(backend_->QuantizeChannels(x, q8, s8).ok());
  quantize_refused(x, kv32, s8, "an f32 q");
  quantize_refused(I32({2, 10, 64}, std::vector<int32_t>(1280)), q8, s8, "an i32 x");
  quantize_refused(x, I8(*backend_, {2, 9, 64}, std::vector<int8_t>(2 * 9 * 64)), s8,
                   "q of another shape");
  quantize_refused(x, q8, Poisoned({2, 10}), "scales of another shape");
  quantize_refused(x, q8, Poisoned({2, 1, 64}), "scales of rank 3");
  quantize_refused(F32({1280}, Random(1280)), q8, s8, "x of rank 1");
  quantize_refused(x, q8, Tensor(), "no scales");
  const absl::StatusOr<Tensor> rows = x.Reshape({20, 64});
  ASSERT_TRUE(rows.ok()) << rows.status();
  const absl::StatusOr<Tensor> over_x = rows->Slice(0, 2);
  ASSERT_TRUE(over_x.ok()) << over_x.status();
  quantize_refused(x, q8, *over_x, "scales over x");
}

}  // namespace
}  // namespace waav
