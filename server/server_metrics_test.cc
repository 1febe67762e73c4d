#include "server/server_metrics.h"

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace waav::server {
namespace {

double Sample(const metrics::Registry& registry, const std::string& series) {
  const std::string text = registry.Serialize();
  const std::string prefix = series + " ";
  const size_t at = text.find("\n" + prefix);
  EXPECT_NE(at, std::string::npos) << series << " not in\n" << text;
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + 1 + prefix.size(), nullptr);
}

constexpr char kLaunches[] = "waav_kernel_launches_total{backend=\"cpu\"}";
constexpr char kReplays[] = "waav_graph_replays_total{backend=\"cpu\"}";
constexpr char kUsed[] = "waav_device_memory_used_bytes{backend=\"cpu\",device=\"0\"}";
constexpr char kCapacity[] = "waav_device_memory_capacity_bytes{backend=\"cpu\",device=\"0\"}";

TEST(ServerMetrics, EverySeriesExistsFromTheStart) {
  metrics::Registry registry;
  auto m = ServerMetrics::Create(&registry);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Sample(registry, "waav_queue_depth{queue=\"ingest\"}"), 0);
  EXPECT_EQ(Sample(registry, "waav_queue_depth{queue=\"scheduler\"}"), 0);
  (*m)->scheduler_queue_depth().Set(3);
  EXPECT_EQ(Sample(registry, "waav_queue_depth{queue=\"scheduler\"}"), 3);
}

// Two backends of one kind (as waavd has: Whisper's and the VAD's) add up into one series; a
// sample adds only what is new since the previous one.
TEST(ServerMetrics, SampledBackendsAddUp) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  metrics::Registry registry;
  auto m = ServerMetrics::Create(&registry);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(CreateCpuBackend({.num_threads = 1}));
  backends.push_back(CreateCpuBackend({.num_threads = 1}));
  for (const auto& b : backends) ASSERT_TRUE((*m)->AddBackend(b.get()).ok());
  EXPECT_EQ(Sample(registry, kLaunches), 0);  // created at 0 before any sample
  (*m)->SampleBackends();
  EXPECT_EQ(Sample(registry, kLaunches), 0);
  EXPECT_EQ(Sample(registry, kReplays), 0);
  EXPECT_EQ(Sample(registry, kUsed), 0);
  EXPECT_EQ(Sample(registry, kCapacity),
            static_cast<double>(backends[0]->stats().memory_capacity_bytes));

  std::vector<Tensor> tensors;
  uint64_t expected_launches = 0, expected_replays = 0;
  for (int round = 0; round < 3; ++round) {
    for (const auto& b : backends) {
      const int64_t n = draw(1, 5000);
      auto x = b->Allocate({n}, DType::kF32);
      ASSERT_TRUE(x.ok());
      tensors.push_back(*x);
      const int calls = draw(0, 10);
      for (int i = 0; i < calls; ++i) ASSERT_TRUE(b->Gelu(*x, *x).ok());
      expected_launches += static_cast<uint64_t>(calls);
      ASSERT_TRUE(b->BeginCapture().ok());
      ASSERT_TRUE(b->Gelu(*x, *x).ok());
      auto graph = b->EndCapture();
      ASSERT_TRUE(graph.ok());
      const int replays = draw(0, 5);
      for (int i = 0; i < replays; ++i) ASSERT_TRUE((*graph)->Replay().ok());
      expected_replays += static_cast<uint64_t>(replays);
    }
    (*m)->SampleBackends();
    EXPECT_EQ(Sample(registry, kLaunches), static_cast<double>(expected_launches))
        << "seed " << seed;
    EXPECT_EQ(Sample(registry, kReplays), static_cast<double>(expected_replays)) << "seed " << seed;
    const double held = static_cast<double>(backends[0]->stats().memory_held_bytes +
                                            backends[1]->stats().memory_held_bytes);
    EXPECT_GT(held, 0);
    EXPECT_EQ(Sample(registry, kUsed), held) << "seed " << seed;
  }
  (*m)->SampleBackends();  // nothing new: nothing added
  EXPECT_EQ(Sample(registry, kLaunches), static_cast<double>(expected_launches));
}

}  // namespace
}  // namespace waav::server
