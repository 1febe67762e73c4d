// Percentiles (linear interpolation between ranks, numpy's default) and summaries.
#include "load-tests/latency_stats.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace waav::load {
namespace {

TEST(PercentileTest, MatchesNumpyLinearOnKnownValues) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 95), 3.85);  // numpy.percentile([1,2,3,4], 95)
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  const std::vector<double> odd = {10, 20, 30, 40, 50};
  EXPECT_DOUBLE_EQ(Percentile(odd, 50), 30);
  EXPECT_DOUBLE_EQ(Percentile(odd, 25), 20);
  EXPECT_DOUBLE_EQ(Percentile(odd, 90), 46);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
  // Out-of-range p is clamped.
  EXPECT_DOUBLE_EQ(Percentile(v, -5), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 150), 4);
}

TEST(PercentileTest, RandomSamplesAreMonotoneAndWithinTheirRanks) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> latency(5, 1);
  for (int round = 0; round < 50; ++round) {
    std::vector<double> v(1 + rng() % 300);
    for (double& x : v) x = latency(rng);
    std::sort(v.begin(), v.end());
    double last = v.front();
    for (double p = 0; p <= 100; p += 0.5) {
      const double q = Percentile(v, p);
      EXPECT_GE(q, last);
      last = q;
      // At least ceil(p% of n-1) samples lie at or below it... as the rank says.
      const double rank = p / 100 * static_cast<double>(v.size() - 1);
      EXPECT_GE(q, v[static_cast<size_t>(rank)]);
      EXPECT_LE(q, v[std::min(v.size() - 1, static_cast<size_t>(rank) + 1)]);
    }
  }
}

TEST(SummaryTest, SummarizesAnyOrderAndEmpty) {
  const Summary s = Summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.p95, 4.8);
  EXPECT_DOUBLE_EQ(s.p99, 4.96);
  const Summary empty = Summarize({});
  EXPECT_EQ(empty.count, 0u);
  EXPECT_EQ(empty.p99, 0);
  const Summary negative = Summarize({-20, 10});
  EXPECT_DOUBLE_EQ(negative.p50, -5);
}

}  // namespace
}  // namespace waav::load
