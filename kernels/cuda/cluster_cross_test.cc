// The cluster step's cross-attention building blocks (cluster_cross_check.h) against a CPU
// softmax on fresh random keys, values and queries: the tensor-core version and the CUDA-core
// one, at key counts of none, one, part of a 16-key tile, whole tiles, a warp's three-tile chunk
// and more than one chunk per warp (the layers' kernel only ever gives them ~94), and with
// scores large enough that the online softmax must rescale. The stage's tensor maps refuse
// shapes they cannot take (host-side, no GPU needed).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cluster_cross_check.h"
#include "kernels/cuda/cluster_cross_stage.cuh"
#include "kernels/cuda/device_caps.cuh"
#include "kernels/cuda/gpu.h"

namespace waav::cuda {
namespace {

constexpr int kD = 384, kHeads = 6, kDh = 64, kRec = kDh + 4;

// f32 → f16 bits, round to nearest even; magnitudes below f16's normal range become a signed
// zero (uniform random inputs land there once in ~16 k draws).
uint16_t HalfBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int exponent = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = u & 0x7fffffu;
  if (exponent <= 0) return static_cast<uint16_t>(sign);
  uint32_t h = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;
  return static_cast<uint16_t>(sign | h);
}
// f16 bits → value, zero and subnormals included (before session 24 a zero decoded as 2^-15,
// and a random input that HalfBits made zero failed the comparison: seed 2294388102).
float HalfValue(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -24)
                              : std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  return (h & 0x8000) != 0 ? -magnitude : magnitude;
}

struct Device {
  void* k = nullptr;
  void* v = nullptr;
  float* q = nullptr;
  float* out = nullptr;
  ~Device() {
    cudaFree(k);
    cudaFree(v);
    cudaFree(q);
    cudaFree(out);
  }
};

TEST(CrossStageMaps, RefuseShapesAMapCannotTakeBeforeAskingTheDriver) {
  static char cache[16];
  PersistentDecoderParams p;
  p.batch = 1;
  p.audio_ctx = 1500;
  p.n_layers = 4;
  for (int layer = 0; layer < 4; ++layer) p.cross_k[layer] = p.cross_v[layer] = cache;
  CrossStageMaps maps;
  PersistentDecoderParams bad = p;
  bad.n_layers = kPersistentMaxLayers + 1;
  EXPECT_EQ(EncodeCrossStageMaps(bad, maps), cudaErrorInvalidValue);
  bad = p;
  bad.n_layers = 0;
  EXPECT_EQ(EncodeCrossStageMaps(bad, maps), cudaErrorInvalidValue);
  bad = p;
  bad.batch = 8;
  bad.audio_ctx = INT32_MAX / 4;  // more keys than a map's coordinate reaches
  EXPECT_EQ(EncodeCrossStageMaps(bad, maps), cudaErrorInvalidValue);
  bad = p;
  bad.audio_ctx = 0;
  EXPECT_EQ(EncodeCrossStageMaps(bad, maps), cudaErrorInvalidValue);
  bad = p;
  bad.cross_v[3] = nullptr;
  EXPECT_EQ(EncodeCrossStageMaps(bad, maps), cudaErrorInvalidValue);
}

TEST(ClusterCrossAttention, MatchesCpuSoftmaxAtEveryKeyCount) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no usable GPU, CUDA test skipped";
  }
  if (!Sm90CodeRuns()) {
    GTEST_SKIP() << "the cluster step's kernels need compute capability 9.0 and sm_90 code";
  }
  const int n_max = kClusterCrossCheckMaxKeys;
  Device dev;
  ASSERT_EQ(cudaMalloc(&dev.k, size_t{2} * n_max * kD), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dev.v, size_t{2} * n_max * kD), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dev.q, sizeof(float) * kD), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dev.out, sizeof(float) * kHeads * kRec), cudaSuccess);
  EXPECT_EQ(ClusterCrossAttentionCheck(dev.k, dev.v, n_max + 1, dev.q, 1.0f, true, dev.out),
            cudaErrorInvalidValue);

  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // (n_keys, scale): 94 is what the layers' blocks get; 110 gives a warp two chunks; scale 2
  // spreads the scores over ~±60 so that the running maximum moves.
  const std::pair<int, float> cases[] = {{0, 0.125f},  {1, 0.125f},  {7, 0.125f},   {16, 0.125f},
                                         {17, 0.125f}, {47, 0.125f}, {48, 0.125f},  {49, 0.125f},
                                         {93, 0.125f}, {94, 0.125f}, {110, 0.125f}, {120, 0.125f},
                                         {94, 2.0f},   {120, 2.0f}};
  for (const auto& [n, scale] : cases) {
    SCOPED_TRACE(absl::StrCat(n, " keys, scale ", scale, ", seed ", seed));
    std::vector<uint16_t> k16(static_cast<size_t>(n) * kD), v16(static_cast<size_t>(n) * kD);
    for (auto& h : k16) h = HalfBits(dist(rng));
    for (auto& h : v16) h = HalfBits(dist(rng));
    std::vector<float> q(kD);
    for (auto& x : q) x = dist(rng);
    if (n > 0) {
      ASSERT_EQ(cudaMemcpy(dev.k, k16.data(), 2 * k16.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dev.v, v16.data(), 2 * v16.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    ASSERT_EQ(cudaMemcpy(dev.q, q.data(), sizeof(float) * kD, cudaMemcpyHostToDevice), cudaSuccess);
    for (const bool mma : {true, false}) {
      SCOPED_TRACE(mma ? "tensor cores" : "CUDA cores");
      ASSERT_EQ(ClusterCrossAttentionCheck(dev.k, dev.v, n, dev.q, scale, mma, dev.out),
                cudaSuccess);
      std::vector<float> out(kHeads * kRec);
      ASSERT_EQ(cudaMemcpy(out.data(), dev.out, sizeof(float) * out.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int h = 0; h < kHeads; ++h) {
        const float* rec = out.data() + h * kRec;
        const float m = rec[kDh], l = rec[kDh + 1];
        if (n == 0) {  // an empty partial: weight 0 in the cluster's merge
          EXPECT_EQ(l, 0.0f);
          EXPECT_TRUE(std::isinf(m) && m < 0) << m;
          for (int d = 0; d < kDh; ++d) EXPECT_EQ(rec[d], 0.0f);
          continue;
        }
        std::vector<double> s(n);
        double top = -INFINITY;
        for (int i = 0; i < n; ++i) {
          double dot = 0.0;
          for (int d = 0; d < kDh; ++d) {
            dot += static_cast<double>(q[h * kDh + d]) *
                   HalfValue(k16[static_cast<size_t>(i) * kD + h * kDh + d]);
          }
          s[i] = dot * scale;
          top = std::max(top, s[i]);
        }
        double sum = 0.0;
        std::vector<double> o(kDh, 0.0);
        for (int i = 0; i < n; ++i) {
          const double p = std::exp(s[i] - top);
          sum += p;
          for (int d = 0; d < kDh; ++d)
            o[d] += p * HalfValue(v16[static_cast<size_t>(i) * kD + h * kDh + d]);
        }
        // The log-sum-exp the cluster's merge weighs this partial by, and the normalised output.
        EXPECT_NEAR(m + std::log(l), top + std::log(sum), 1e-4) << "head " << h;
        ASSERT_GT(l, 0.0f) << "head " << h;
        for (int d = 0; d < kDh; ++d) {
          EXPECT_NEAR(rec[d] / l, o[d] / sum, 2e-5) << "head " << h << ", dim " << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace waav::cuda
