#include "engine/metrics/exposition.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace waav::metrics {
namespace {

TEST(FormatDouble, MatchesGoFormatFloatG) {
  // Expected strings are what Go's strconv.FormatFloat(v, 'g', -1, 64) writes, which is what
  // Prometheus itself writes for `le` labels and sample values.
  const struct {
    double v;
    const char* want;
  } cases[] = {
      {0.0, "0"},
      {-0.0, "0"},
      {1.0, "1"},
      {-1.0, "-1"},
      {0.005, "0.005"},
      {0.0001, "0.0001"},
      {0.00001, "1e-05"},
      {0.00005, "5e-05"},
      {0.00025, "0.00025"},
      {2.5, "2.5"},
      {100000.0, "100000"},
      {999999.0, "999999"},
      {1e6, "1e+06"},
      {1234567.0, "1.234567e+06"},
      {1.5e300, "1.5e+300"},
      {1e21, "1e+21"},
      {5e-324, "5e-324"},
      {123.456, "123.456"},
      {0.1 + 0.2, "0.30000000000000004"},
      {-0.075, "-0.075"},
      {1024.0, "1024"},
      {2.147483648e9, "2.147483648e+09"},
      {std::numeric_limits<double>::infinity(), "+Inf"},
      {-std::numeric_limits<double>::infinity(), "-Inf"},
      {std::numeric_limits<double>::quiet_NaN(), "NaN"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(FormatDouble(c.v), c.want) << "for " << c.v;
  }
}

TEST(FormatDouble, RoundTripsRandomDoubles) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 20000; ++i) {
    // Random bit patterns cover every exponent; half of them uniform in a latency-like range.
    const double v = (i % 2 == 0) ? std::bit_cast<double>(rng())
                                  : std::uniform_real_distribution<double>(0, 2.5)(rng);
    if (std::isnan(v)) continue;
    const std::string text = FormatDouble(v);
    if (std::isinf(v)) {
      EXPECT_EQ(text, v > 0 ? "+Inf" : "-Inf");
      continue;
    }
    const double back = std::strtod(text.c_str(), nullptr);
    ASSERT_EQ(std::bit_cast<uint64_t>(back), std::bit_cast<uint64_t>(v == 0 ? 0.0 : v))
        << "value " << text << " (seed " << seed << ")";
    ASSERT_EQ(text.find_first_not_of("0123456789.e+-"), std::string::npos) << text;
  }
}

TEST(Names, MetricNames) {
  for (const char* good : {"a", "_", ":", "waav_stage_latency_seconds", "job:x:rate5m", "A9_:b"}) {
    EXPECT_TRUE(IsValidMetricName(good)) << good;
  }
  for (const char* bad : {"", "9a", "a-b", "a b", "a.b", "é", "a\n", "a{b}", "waav_latency_µs"}) {
    EXPECT_FALSE(IsValidMetricName(bad)) << bad;
  }
}

TEST(Names, LabelNames) {
  for (const char* good : {"a", "_", "_a", "stage", "a9", "Kind"}) {
    EXPECT_TRUE(IsValidLabelName(good)) << good;
  }
  for (const char* bad : {"", "9a", "a:b", "__name__", "__x", "a-b", "a b"}) {
    EXPECT_FALSE(IsValidLabelName(bad)) << bad;
  }
}

TEST(Escaping, LabelValues) {
  std::string out;
  AppendEscapedLabelValue("a\\b\"c\nd'e\tf", &out);
  EXPECT_EQ(out, "a\\\\b\\\"c\\nd'e\tf");
}

TEST(Escaping, HelpKeepsQuotes) {
  std::string out;
  AppendEscapedHelp("say \"hi\"\\now\nnext", &out);
  EXPECT_EQ(out, "say \"hi\"\\\\now\\nnext");
}

}  // namespace
}  // namespace waav::metrics
