// Backend::SharedKvAttention on the CPU against a double-precision reference on fresh random
// inputs (tolerance: relative L2 error 1e-5, as every CPU kernel), and its refusals.
#include <gtest/gtest.h>

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
                                        F32({c.batch, c.tk, c.width}, kv),
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
    const absl::Status s = backend_->SharedKvAttention(q_in, kv_in, heads, scale, out_in);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
    EXPECT_NE(s.message().find("SharedKvAttention"), std::string::npos) << s;
  };
  ASSERT_TRUE(backend_->SharedKvAttention(q, kv, 6, 0.125f, out).ok());
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

}  // namespace
}  // namespace waav
