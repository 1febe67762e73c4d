#include "engine/metrics/batch_metrics.h"

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace waav::metrics {
namespace {

double Sample(const Registry& registry, const std::string& series) {
  const std::string text = registry.Serialize();
  const std::string prefix = series + " ";
  const size_t at = text.find("\n" + prefix);
  EXPECT_NE(at, std::string::npos) << series << " not in\n" << text;
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + 1 + prefix.size(), nullptr);
}

TEST(BatchMetrics, EveryModelExportedFromTheStart) {
  Registry registry;
  auto metrics = BatchMetrics::Create(&registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  for (const absl::string_view model : kBatchModels) {
    EXPECT_EQ(Sample(registry, absl::StrCat("waav_batch_size_count{model=\"", model, "\"}")), 0);
  }
}

TEST(BatchMetrics, CountsStepsAndStreams) {
  Registry registry;
  auto metrics = BatchMetrics::Create(&registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  const int streams = std::uniform_int_distribution<int>(1, 1024)(rng);
  const int steps = std::uniform_int_distribution<int>(1, 300)(rng);
  (*metrics)->Observe(BatchModel::kWhisperEncoder, streams);
  (*metrics)->Observe(BatchModel::kWhisperDecoder, streams, steps);
  (*metrics)->Observe(BatchModel::kVad, 3);
  (*metrics)->Observe(BatchModel::kVad, 5, 0);  // no step: nothing recorded
  EXPECT_EQ(Sample(registry, "waav_batch_size_count{model=\"whisper_encoder\"}"), 1)
      << "seed " << seed;
  EXPECT_EQ(Sample(registry, "waav_batch_size_sum{model=\"whisper_encoder\"}"), streams)
      << "seed " << seed;
  EXPECT_EQ(Sample(registry, "waav_batch_size_count{model=\"whisper_decoder\"}"), steps)
      << "seed " << seed;
  EXPECT_EQ(Sample(registry, "waav_batch_size_sum{model=\"whisper_decoder\"}"),
            static_cast<double>(streams) * steps)
      << "seed " << seed;
  // 3 streams: above the bound 2, within 4.
  EXPECT_EQ(Sample(registry, "waav_batch_size_bucket{model=\"vad\",le=\"2\"}"), 0);
  EXPECT_EQ(Sample(registry, "waav_batch_size_bucket{model=\"vad\",le=\"4\"}"), 1);
  EXPECT_EQ(Sample(registry, "waav_batch_size_count{model=\"vad\"}"), 1);
  EXPECT_EQ(Sample(registry, "waav_batch_size_count{model=\"vits\"}"), 0);

  // A second facade shares the series.
  auto second = BatchMetrics::Create(&registry);
  ASSERT_TRUE(second.ok()) << second.status();
  (*second)->Observe(BatchModel::kVad, 1);
  EXPECT_EQ(Sample(registry, "waav_batch_size_count{model=\"vad\"}"), 2);
}

TEST(BatchMetrics, NameTakenByAnotherDefinition) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter({"waav_batch_size", "something else", {}}).ok());
  EXPECT_EQ(BatchMetrics::Create(&registry).status().code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace waav::metrics
