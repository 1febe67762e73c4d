#include "engine/metrics/metric_names.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/metrics/exposition.h"
#include "gtest/gtest.h"

namespace waav::metrics {
namespace {

TEST(MetricNames, FollowPrometheusConventions) {
  std::set<absl::string_view> names;
  for (const MetricDef& def : kAllMetrics) {
    SCOPED_TRACE(std::string(def.name));
    EXPECT_TRUE(names.insert(def.name).second) << "listed twice";
    EXPECT_TRUE(IsValidMetricName(def.name));
    EXPECT_TRUE(absl::StartsWith(def.name, "waav_"));
    EXPECT_FALSE(def.help.empty());
    EXPECT_EQ(absl::EndsWith(def.name, "_total"), def.type == MetricType::kCounter);
    EXPECT_EQ(def.buckets.empty(), def.type != MetricType::kHistogram);
    if (!def.unit.empty()) {
      // The unit is the name's last word (before _total for counters).
      absl::string_view stem = def.name;
      absl::ConsumeSuffix(&stem, "_total");
      EXPECT_TRUE(absl::EndsWith(stem, absl::StrCat("_", def.unit)));
    }
    for (size_t i = 0; i < def.label_count(); ++i) EXPECT_TRUE(IsValidLabelName(def.labels[i]));
    for (size_t i = def.label_count(); i < kMaxDefLabels; ++i) EXPECT_TRUE(def.labels[i].empty());
  }
  for (absl::string_view v : kStreamOutcomes) EXPECT_FALSE(v.empty());
  EXPECT_NE(std::find(kStreamOutcomes.begin(), kStreamOutcomes.end(), "error"),
            kStreamOutcomes.end())
      << "the stream error alert selects outcome=\"error\"";
}

TEST(MetricNames, EveryDefinitionRegistersOnce) {
  Registry registry;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass returns the same families
    for (const MetricDef& def : kAllMetrics) {
      absl::Status s;
      switch (def.type) {
        case MetricType::kCounter:
          s = RegisterCounter(&registry, def).status();
          break;
        case MetricType::kGauge:
          s = RegisterGauge(&registry, def).status();
          break;
        case MetricType::kHistogram:
          s = RegisterHistogram(&registry, def).status();
          break;
      }
      EXPECT_TRUE(s.ok()) << def.name << ": " << s;
    }
  }
}

TEST(MetricNames, WrongTypeIsAnError) {
  Registry registry;
  const absl::Status s = RegisterCounter(&registry, kStageLatencySeconds).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(s.message(), "waav_stage_latency_seconds")) << s;
  EXPECT_EQ(RegisterHistogram(&registry, kBuildInfo).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RegisterGauge(&registry, kStreamsStartedTotal).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace waav::metrics
