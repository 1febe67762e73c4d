#include "engine/metrics/registry.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace waav::metrics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

MetricSpec Spec(std::string name, std::vector<std::string> labels = {},
                std::string help = "help text") {
  return MetricSpec{std::move(name), std::move(help), std::move(labels)};
}

// Sample lines of an exposition: series ("name{labels}") -> value as written.
std::map<std::string, std::string> SampleLines(const std::string& text) {
  std::map<std::string, std::string> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    samples[std::string(line.substr(0, space))] = std::string(line.substr(space + 1));
  }
  return samples;
}

double ValueOf(const std::map<std::string, std::string>& samples, const std::string& series) {
  const auto it = samples.find(series);
  EXPECT_NE(it, samples.end()) << "no sample " << series;
  return it == samples.end() ? kNaN : std::strtod(it->second.c_str(), nullptr);
}

// ---- Counter / Gauge --------------------------------------------------------------------------

TEST(Counter, IncrementsAndIgnoresInvalidAdds) {
  Counter c;
  c.Inc();
  c.IncBy(41);
  c.Add(0.5);
  EXPECT_EQ(c.Value(), 42.5);
  for (double bad : {-1.0, -0.0001, kNaN, kInf, -kInf}) c.Add(bad);
  EXPECT_EQ(c.Value(), 42.5);
  c.Add(0);
  EXPECT_EQ(c.Value(), 42.5);
}

TEST(Gauge, SetAddIncDecAndSpecialValues) {
  Gauge g;
  EXPECT_EQ(g.Value(), 0);
  g.Set(3.5);
  g.Inc();
  g.Dec();
  g.Dec();
  g.Add(-10);
  EXPECT_EQ(g.Value(), -7.5);
  g.Set(kNaN);
  EXPECT_TRUE(std::isnan(g.Value()));
  g.Set(-kInf);
  EXPECT_EQ(g.Value(), -kInf);
}

// ---- Histogram bucketing ----------------------------------------------------------------------

TEST(Histogram, ValueOnABoundGoesInThatBucket) {
  const std::vector<double> bounds = {0.005, 0.01, 0.05};
  Histogram h(bounds);
  h.Observe(0.005);                       // exactly on bound 0
  h.Observe(std::nextafter(0.005, 1.0));  // just above: bucket 1
  h.Observe(std::nextafter(0.005, 0.0));  // just below: bucket 0
  h.Observe(0.05);                        // exactly on the last bound
  h.Observe(std::nextafter(0.05, 1.0));   // above every bound: +Inf
  h.Observe(-1);                          // below everything: bucket 0
  h.Observe(0);
  const Histogram::Snapshot s = h.Read();
  ASSERT_EQ(s.cumulative_counts.size(), 4u);
  EXPECT_EQ(s.cumulative_counts[0], 4u);  // 0.005, below 0.005, -1, 0
  EXPECT_EQ(s.cumulative_counts[1], 5u);
  EXPECT_EQ(s.cumulative_counts[2], 6u);
  EXPECT_EQ(s.cumulative_counts[3], 7u);
  EXPECT_EQ(s.count, 7u);
}

TEST(Histogram, NaNIsDroppedInfinitiesAreCounted) {
  const std::vector<double> bounds = {1, 2};
  Histogram h(bounds);
  h.Observe(kNaN);
  EXPECT_EQ(h.Read().count, 0u);
  EXPECT_EQ(h.Read().sum, 0);

  h.Observe(kInf);
  Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative_counts[1], 0u);
  EXPECT_EQ(s.cumulative_counts[2], 1u);  // +Inf bucket
  EXPECT_EQ(s.sum, kInf);

  Histogram low(bounds);
  low.Observe(-kInf);
  s = low.Read();
  EXPECT_EQ(s.cumulative_counts[0], 1u);
  EXPECT_EQ(s.sum, -kInf);
  low.Observe(kInf);
  EXPECT_TRUE(std::isnan(low.Read().sum));
  EXPECT_EQ(low.Read().count, 2u);
}

TEST(Histogram, MatchesLinearReferenceOnRandomValues) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::vector<double> bounds;
  double b = 0;
  const size_t n = 1 + rng() % kMaxBucketBounds;
  for (size_t i = 0; i < n; ++i) bounds.push_back(b += 0.001 + (rng() % 1000) * 1e-4);
  Histogram h(bounds);
  std::vector<uint64_t> want(n + 1, 0);
  std::uniform_real_distribution<double> dist(-0.01, b * 1.2);
  for (int i = 0; i < 5000; ++i) {
    // A quarter exactly on a bound, the rest anywhere.
    const double v = (rng() % 4 == 0) ? bounds[rng() % n] : dist(rng);
    h.Observe(v);
    size_t bucket = 0;
    while (bucket < n && v > bounds[bucket]) ++bucket;
    ++want[bucket];
  }
  const Histogram::Snapshot s = h.Read();
  uint64_t running = 0;
  for (size_t i = 0; i <= n; ++i) {
    running += want[i];
    ASSERT_EQ(s.cumulative_counts[i], running) << "bucket " << i << " seed " << seed;
  }
}

// ---- Concurrency ------------------------------------------------------------------------------

TEST(Concurrency, TotalsAreExact) {
  Registry registry;
  auto counters = registry.AddCounter(Spec("c_total", {"t"}));
  auto gauges = registry.AddGauge(Spec("g"));
  auto histograms = registry.AddHistogram(Spec("h_seconds"), {0.25, 0.5, 1});
  ASSERT_TRUE(counters.ok() && gauges.ok() && histograms.ok());
  Counter* counter = *(*counters)->WithLabelValues({"shared"});
  Gauge* gauge = *(*gauges)->WithLabelValues({});
  Histogram* histogram = *(*histograms)->WithLabelValues({});

  constexpr int kThreads = 8;
  constexpr int kIterations = 100000;
  std::atomic<bool> done{false};
  // A scraper running alongside: every snapshot must be internally consistent.
  std::thread scraper([&] {
    while (!done.load()) {
      const auto samples = SampleLines(registry.Serialize());
      const double inf = ValueOf(samples, "h_seconds_bucket{le=\"+Inf\"}");
      EXPECT_EQ(inf, ValueOf(samples, "h_seconds_count"));
      EXPECT_LE(ValueOf(samples, "h_seconds_bucket{le=\"0.25\"}"),
                ValueOf(samples, "h_seconds_bucket{le=\"0.5\"}"));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Children looked up concurrently must be the same object.
      Counter* mine = *(*counters)->WithLabels({{"t", "shared"}});
      EXPECT_EQ(mine, counter);
      for (int i = 0; i < kIterations; ++i) {
        mine->Inc();
        mine->Add(0.25);  // exact in binary: the sum must come out exact
        gauge->Inc();
        histogram->Observe((i + t) % 4 * 0.25);  // 0, 0.25, 0.5, 0.75
        gauge->Dec();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done = true;
  scraper.join();

  constexpr double kTotal = double{kThreads} * kIterations;
  EXPECT_EQ(counter->Value(), kTotal * 1.25);
  EXPECT_EQ(gauge->Value(), 0);
  const Histogram::Snapshot s = histogram->Read();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kTotal));
  EXPECT_EQ(s.cumulative_counts[0], static_cast<uint64_t>(kTotal / 2));  // 0 and 0.25
  EXPECT_EQ(s.cumulative_counts[1], static_cast<uint64_t>(kTotal * 3 / 4));
  EXPECT_EQ(s.sum, kTotal * 0.375);
}

// ---- Registration -----------------------------------------------------------------------------

TEST(Registration, SameDefinitionReturnsTheSameFamily) {
  Registry registry;
  auto a = registry.AddHistogram(Spec("x_seconds", {"stage"}), {0.1, 1});
  auto b = registry.AddHistogram(Spec("x_seconds", {"stage"}), {0.1, 1, kInf});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
  auto c1 = registry.AddCounter(Spec("y_total"));
  auto c2 = registry.AddCounter(Spec("y_total"));
  ASSERT_TRUE(c1.ok() && c2.ok());
  EXPECT_EQ(*c1, *c2);
}

TEST(Registration, ConflictingDefinitionsAreErrors) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter(Spec("a_total", {"kind"})).ok());
  ASSERT_TRUE(registry.AddHistogram(Spec("h", {"stage"}), {1, 2}).ok());

  const absl::Status type = registry.AddGauge(Spec("a_total", {"kind"})).status();
  EXPECT_EQ(type.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(absl::StrContains(type.message(), "a_total")) << type;
  EXPECT_TRUE(absl::StrContains(type.message(), "counter")) << type;
  EXPECT_EQ(registry.AddCounter(Spec("a_total", {"other"})).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCounter(Spec("a_total", {"kind"}, "other help")).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddHistogram(Spec("h", {"stage"}), {1, 3}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCounter(Spec("h", {"stage"})).status().code(),
            absl::StatusCode::kAlreadyExists);
  // Series names written by the histogram are taken too, and the other way round.
  EXPECT_EQ(registry.AddCounter(Spec("h_count")).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddGauge(Spec("h_bucket")).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.AddGauge(Spec("z_sum")).ok());
  EXPECT_EQ(registry.AddHistogram(Spec("z"), {1}).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(Registration, InvalidNamesAndLabels) {
  Registry registry;
  for (const char* name : {"", "1abc", "a-b", "a b", "ü"}) {
    const absl::Status s = registry.AddCounter(Spec(name)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
  }
  const std::vector<std::vector<std::string>> bad_labels = {
      {"1x"}, {"a:b"}, {"__name__"}, {""}, {"stage", "stage"}};
  for (const auto& labels : bad_labels) {
    EXPECT_EQ(registry.AddGauge(Spec("g", labels)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << labels[0];
  }
  const absl::Status le = registry.AddHistogram(Spec("h", {"le"}), {1}).status();
  EXPECT_EQ(le.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(le.message(), "le")) << le;
  // `le` is only reserved on histograms.
  EXPECT_TRUE(registry.AddGauge(Spec("g_le", {"le"})).ok());
}

TEST(Registration, InvalidBuckets) {
  Registry registry;
  std::vector<double> too_many;
  for (size_t i = 0; i <= kMaxBucketBounds; ++i) too_many.push_back(static_cast<double>(i));
  const std::vector<std::vector<double>> bad = {{},     {kInf}, {kNaN},       {-kInf, 1}, {1, kNaN},
                                                {2, 1}, {1, 1}, {1, kInf, 2}, too_many};
  for (const auto& bounds : bad) {
    const absl::Status s = registry.AddHistogram(Spec("h"), bounds).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bounds.size() << " bounds";
    EXPECT_TRUE(absl::StrContains(s.message(), "'h'")) << s;
  }
  too_many.pop_back();
  EXPECT_TRUE(registry.AddHistogram(Spec("h"), too_many).ok());
}

TEST(Labels, ByNameInAnyOrderOrByPosition) {
  Registry registry;
  auto family = registry.AddCounter(Spec("f_total", {"kind", "outcome"}));
  ASSERT_TRUE(family.ok());
  auto by_name = (*family)->WithLabels({{"outcome", "ok"}, {"kind", "stt"}});
  auto by_position = (*family)->WithLabelValues({"stt", "ok"});
  ASSERT_TRUE(by_name.ok() && by_position.ok());
  EXPECT_EQ(*by_name, *by_position);
  EXPECT_NE(*by_name, *(*family)->WithLabelValues({"tts", "ok"}));

  const auto code = [](const absl::Status& s) { return s.code(); };
  EXPECT_EQ(code((*family)->WithLabels({{"kind", "stt"}}).status()),
            absl::StatusCode::kInvalidArgument);  // missing
  EXPECT_EQ(code((*family)->WithLabels({{"kind", "a"}, {"kind", "b"}, {"outcome", "c"}}).status()),
            absl::StatusCode::kInvalidArgument);  // twice
  EXPECT_EQ(code((*family)->WithLabels({{"kind", "a"}, {"stage", "b"}}).status()),
            absl::StatusCode::kInvalidArgument);  // unknown
  EXPECT_EQ(code((*family)->WithLabelValues({"stt"}).status()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code((*family)->WithLabelValues({}).status()), absl::StatusCode::kInvalidArgument);
}

// ---- Serialization ----------------------------------------------------------------------------

TEST(Serialize, StructureOrderAndEscaping) {
  Registry registry;
  auto zeta = registry.AddGauge(Spec("zeta", {"name"}, "Multi\nline \\ help \"quoted\""));
  auto alpha = registry.AddCounter(Spec("alpha_total", {"kind"}));
  auto hist = registry.AddHistogram(Spec("lat_seconds", {"stage"}), {0.005, 0.01});
  auto plain = registry.AddHistogram(Spec("plain_seconds"), {1});
  auto unused = registry.AddCounter(Spec("unused_total", {"kind"}));
  auto lonely = registry.AddGauge(Spec("lonely"));
  ASSERT_TRUE(zeta.ok() && alpha.ok() && hist.ok() && plain.ok() && unused.ok() && lonely.ok());

  (*(*zeta)->WithLabelValues({"quote\" back\\ nl\n"}))->Set(0.5);
  (*(*alpha)->WithLabelValues({"tts"}))->IncBy(2);
  (*(*alpha)->WithLabelValues({"stt"}))->IncBy(1);
  Histogram* stt = *(*hist)->WithLabelValues({"stt"});
  for (double v : {0.001, 0.005, 0.007, 0.5}) stt->Observe(v);
  (*(*plain)->WithLabelValues({}))->Observe(0.25);

  const std::string text = registry.Serialize();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');

  // Families sorted by name; HELP then TYPE before the samples; unused families omitted.
  const std::vector<std::string> order = {
      "# HELP alpha_total ", "# TYPE alpha_total counter",     "# TYPE lat_seconds histogram",
      "# TYPE lonely gauge", "# TYPE plain_seconds histogram", "# TYPE zeta gauge"};
  size_t at = 0;
  for (const std::string& want : order) {
    const size_t found = text.find(want, at);
    ASSERT_NE(found, std::string::npos) << want << "\n" << text;
    at = found;
  }
  EXPECT_FALSE(absl::StrContains(text, "unused_total"));
  EXPECT_TRUE(absl::StrContains(
      text, "# HELP zeta Multi\\nline \\\\ help \"quoted\"\n# TYPE zeta gauge\n"));
  // Children sorted by label value: stt before tts.
  EXPECT_LT(text.find("alpha_total{kind=\"stt\"} 1\n"), text.find("alpha_total{kind=\"tts\"} 2\n"));

  const auto samples = SampleLines(text);
  EXPECT_EQ(ValueOf(samples, "zeta{name=\"quote\\\" back\\\\ nl\\n\"}"), 0.5);
  EXPECT_EQ(ValueOf(samples, "lonely"), 0);
  // Cumulative buckets, le formatted as Prometheus does, +Inf last, then _sum and _count.
  EXPECT_EQ(ValueOf(samples, "lat_seconds_bucket{stage=\"stt\",le=\"0.005\"}"), 2);
  EXPECT_EQ(ValueOf(samples, "lat_seconds_bucket{stage=\"stt\",le=\"0.01\"}"), 3);
  EXPECT_EQ(ValueOf(samples, "lat_seconds_bucket{stage=\"stt\",le=\"+Inf\"}"), 4);
  EXPECT_NEAR(ValueOf(samples, "lat_seconds_sum{stage=\"stt\"}"), 0.513, 1e-12);
  EXPECT_EQ(ValueOf(samples, "lat_seconds_count{stage=\"stt\"}"), 4);
  EXPECT_LT(text.find("le=\"0.01\"}"), text.find("le=\"+Inf\"}"));
  EXPECT_LT(text.find("lat_seconds_bucket{stage=\"stt\",le=\"+Inf\"}"),
            text.find("lat_seconds_sum{stage=\"stt\"}"));
  EXPECT_EQ(ValueOf(samples, "plain_seconds_bucket{le=\"1\"}"), 1);
  EXPECT_EQ(ValueOf(samples, "plain_seconds_sum"), 0.25);
  EXPECT_EQ(ValueOf(samples, "plain_seconds_count"), 1);

  // Every line is a comment or "series value" with one space before the value.
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') {
      EXPECT_TRUE(absl::StartsWith(line, "# HELP ") || absl::StartsWith(line, "# TYPE ")) << line;
      continue;
    }
    const std::string value(line.substr(line.rfind(' ') + 1));
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    EXPECT_TRUE(*end == '\0' || value == "+Inf" || value == "NaN") << line;
  }
  // The same state serialises to the same bytes.
  EXPECT_EQ(text, registry.Serialize());
}

TEST(Serialize, SpecialValues) {
  Registry registry;
  auto g = registry.AddGauge(Spec("g", {"v"}));
  ASSERT_TRUE(g.ok());
  (*(*g)->WithLabelValues({"nan"}))->Set(kNaN);
  (*(*g)->WithLabelValues({"pinf"}))->Set(kInf);
  (*(*g)->WithLabelValues({"ninf"}))->Set(-kInf);
  (*(*g)->WithLabelValues({"big"}))->Set(1e6);
  const auto samples = SampleLines(registry.Serialize());
  EXPECT_EQ(samples.at("g{v=\"nan\"}"), "NaN");
  EXPECT_EQ(samples.at("g{v=\"pinf\"}"), "+Inf");
  EXPECT_EQ(samples.at("g{v=\"ninf\"}"), "-Inf");
  EXPECT_EQ(samples.at("g{v=\"big\"}"), "1e+06");
}

}  // namespace
}  // namespace waav::metrics
