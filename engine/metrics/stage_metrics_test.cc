#include "engine/metrics/stage_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/metrics/latency_budgets.h"
#include "engine/metrics/metric_names.h"
#include "engine/metrics/stage.h"
#include "engine/metrics/stage_timer.h"
#include "gtest/gtest.h"

namespace waav::metrics {
namespace {

// ---- Stage names ------------------------------------------------------------------------------

TEST(Stage, NamesRoundTrip) {
  for (const Stage stage : kAllStages) {
    auto back = StageFromName(StageName(stage));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, stage);
  }
  EXPECT_EQ(StageName(Stage::kStt), "stt");
  EXPECT_EQ(StageName(Stage::kDecoderStep), "decoder_step");
  EXPECT_TRUE(IsPipelineStage(Stage::kOutput));
  EXPECT_FALSE(IsPipelineStage(Stage::kIngestWait));
  const absl::Status unknown = StageFromName("STT").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(unknown.message(), "decoder_step")) << unknown;
}

// ---- LatencyBudgets ---------------------------------------------------------------------------

TEST(LatencyBudgets, DefaultsAreTheDesignPlan) {
  const LatencyBudgets b;
  EXPECT_TRUE(b.Validate().ok()) << b.Validate();
  EXPECT_EQ(b.BudgetMs(Stage::kCapture), 10);
  EXPECT_EQ(b.BudgetMs(Stage::kPreprocessing), 5);
  EXPECT_EQ(b.BudgetMs(Stage::kStt), 50);
  EXPECT_EQ(b.BudgetMs(Stage::kProcessing), 10);
  EXPECT_EQ(b.BudgetMs(Stage::kTts), 100);
  EXPECT_EQ(b.BudgetMs(Stage::kOutput), 5);
  EXPECT_EQ(b.BudgetMs(Stage::kEncoder), 0);
  EXPECT_EQ(b.margin_ms, 20);
  EXPECT_EQ(b.end_to_end_ms, 200);
  EXPECT_EQ(b.ToString(),
            "capture=10,preprocessing=5,stt=50,processing=10,tts=100,output=5,margin=20,"
            "end_to_end=200");
}

TEST(LatencyBudgets, ValidateNamesTheProblem) {
  const struct {
    void (*change)(LatencyBudgets&);
    const char* mentions;
  } cases[] = {
      {[](LatencyBudgets& b) { b.stt_ms = -1; }, "'stt'"},
      {[](LatencyBudgets& b) { b.tts_ms = std::nan(""); }, "'tts'"},
      {[](LatencyBudgets& b) { b.margin_ms = std::numeric_limits<double>::infinity(); },
       "'margin'"},
      {[](LatencyBudgets& b) { b.capture_ms = 0; }, "'capture'"},
      {[](LatencyBudgets& b) { b.end_to_end_ms = 0; }, "'end_to_end'"},
      {[](LatencyBudgets& b) { b.stt_ms = 51; }, "end_to_end"},
      {[](LatencyBudgets& b) { b.encoder_ms = 250; }, "'encoder'"},
      {[](LatencyBudgets& b) { b.queue_ms = -0.5; }, "'queue'"},
  };
  for (const auto& c : cases) {
    LatencyBudgets b;
    c.change(b);
    const absl::Status s = b.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.mentions;
    EXPECT_TRUE(absl::StrContains(s.message(), c.mentions)) << s;
  }
  LatencyBudgets shorter_margin;
  shorter_margin.margin_ms = 0;
  shorter_margin.stt_ms = 70;
  EXPECT_TRUE(shorter_margin.Validate().ok());
}

TEST(LatencyBudgets, ApplyOverrides) {
  LatencyBudgets b;
  ASSERT_TRUE(b.ApplyOverrides(" stt = 60 ,end_to_end=210, decoder_step=0.05").ok());
  EXPECT_EQ(b.stt_ms, 60);
  EXPECT_EQ(b.end_to_end_ms, 210);
  EXPECT_EQ(b.decoder_step_ms, 0.05);
  EXPECT_TRUE(b.Validate().ok()) << b.Validate();
  ASSERT_TRUE(b.ApplyOverrides("").ok());
  ASSERT_TRUE(b.ApplyOverrides("   ").ok());
  EXPECT_EQ(b.stt_ms, 60);
}

TEST(LatencyBudgets, BadOverridesChangeNothing) {
  const struct {
    std::string text;
    absl::StatusCode code;
    const char* mentions;
  } cases[] = {
      {"stt", absl::StatusCode::kInvalidArgument, "stt"},    // truncated
      {"stt=", absl::StatusCode::kInvalidArgument, "stt="},  // truncated
      {"=5", absl::StatusCode::kInvalidArgument, "no name"},
      {"stt=60,", absl::StatusCode::kInvalidArgument, "want name=milliseconds"},
      {"stt=abc", absl::StatusCode::kInvalidArgument, "'abc'"},  // wrong type
      {"stt=60ms", absl::StatusCode::kInvalidArgument, "'60ms'"},
      {"stt=1=2", absl::StatusCode::kInvalidArgument, "'1=2'"},
      {"stt=-3", absl::StatusCode::kInvalidArgument, "stt"},
      {"stt=nan", absl::StatusCode::kInvalidArgument, "stt"},
      {"stt=inf", absl::StatusCode::kInvalidArgument, "stt"},
      {"stt=1e400", absl::StatusCode::kInvalidArgument, "stt"},
      {"tts=90,stt=1,tts=80", absl::StatusCode::kInvalidArgument, "twice"},
      {"sst=60", absl::StatusCode::kNotFound, "'sst'"},
      {"stt=60\x01,x", absl::StatusCode::kInvalidArgument, "stt"},                   // corrupt
      {std::string(5000, 'a'), absl::StatusCode::kInvalidArgument, "at most 4096"},  // oversized
  };
  for (const auto& c : cases) {
    LatencyBudgets b;
    b.capture_ms = 9;
    const absl::Status s = b.ApplyOverrides(absl::StrCat("capture=7,", c.text));
    EXPECT_EQ(s.code(), c.code) << c.text << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), c.mentions)) << s;
    EXPECT_EQ(b.capture_ms, 9) << "partially applied: " << c.text;
    EXPECT_EQ(b.stt_ms, 50) << c.text;
  }
}

TEST(LatencyBudgets, ToStringRoundTripsRandomBudgets) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> ms(0.001, 30);
  for (int round = 0; round < 200; ++round) {
    LatencyBudgets b;
    b.capture_ms = ms(rng);
    b.stt_ms = ms(rng);
    b.encoder_ms = (rng() % 2) ? ms(rng) : 0;
    b.end_to_end_ms = ms(rng) * 20;
    LatencyBudgets back;
    back.encoder_ms = 123;  // overwritten only when b's is non-zero
    ASSERT_TRUE(back.ApplyOverrides(b.ToString()).ok()) << b.ToString() << " seed " << seed;
    EXPECT_EQ(back.capture_ms, b.capture_ms) << "seed " << seed;
    EXPECT_EQ(back.stt_ms, b.stt_ms) << "seed " << seed;
    EXPECT_EQ(back.end_to_end_ms, b.end_to_end_ms) << "seed " << seed;
    EXPECT_EQ(back.encoder_ms, b.encoder_ms == 0 ? 123 : b.encoder_ms) << "seed " << seed;
  }
}

TEST(LatencyBudgets, DefaultBudgetsAreBucketBounds) {
  const LatencyBudgets b;
  for (size_t i = 0; i < kPipelineStageCount; ++i) {
    const double seconds = b.BudgetMs(kAllStages[i]) / 1000.0;
    EXPECT_NE(
        std::find(kStageLatencyBucketsSeconds.begin(), kStageLatencyBucketsSeconds.end(), seconds),
        kStageLatencyBucketsSeconds.end())
        << StageName(kAllStages[i]);
  }
  EXPECT_NE(std::find(kEndToEndLatencyBucketsSeconds.begin(), kEndToEndLatencyBucketsSeconds.end(),
                      b.end_to_end_ms / 1000.0),
            kEndToEndLatencyBucketsSeconds.end());
}

// ---- StageMetrics -----------------------------------------------------------------------------

double Sample(const Registry& registry, const std::string& series) {
  const std::string text = registry.Serialize();
  const std::string prefix = series + " ";
  const size_t at = text.find("\n" + prefix);
  EXPECT_NE(at, std::string::npos) << series << " not in\n" << text;
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + 1 + prefix.size(), nullptr);
}

TEST(StageMetrics, RegistersBudgetsAndCountsOverruns) {
  Registry registry;
  LatencyBudgets budgets;
  budgets.decoder_step_ms = 0.06;
  auto metrics = StageMetrics::Create(&registry, budgets);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  StageMetrics& m = **metrics;

  EXPECT_EQ(Sample(registry, "waav_stage_budget_seconds{stage=\"stt\"}"), 0.05);
  EXPECT_EQ(Sample(registry, "waav_stage_budget_seconds{stage=\"tts\"}"), 0.1);
  EXPECT_EQ(Sample(registry, "waav_stage_budget_seconds{stage=\"decoder_step\"}"), 0.06 / 1000);
  EXPECT_EQ(Sample(registry, "waav_end_to_end_budget_seconds"), 0.2);
  const std::string text = registry.Serialize();
  EXPECT_FALSE(absl::StrContains(text, "waav_stage_budget_seconds{stage=\"encoder\"}"));
  EXPECT_FALSE(absl::StrContains(text, "waav_stage_budget_overruns_total{stage=\"encoder\"}"));

  m.Observe(Stage::kStt, 0.05);          // exactly on budget: not an overrun
  m.Observe(Stage::kStt, 0.0500001);     // over
  m.Observe(Stage::kStt, std::nan(""));  // dropped
  m.Observe(Stage::kEncoder, 5.0);       // no budget: never an overrun
  m.ObserveEndToEnd(0.2);
  m.ObserveEndToEnd(0.25);
  EXPECT_EQ(Sample(registry, "waav_stage_budget_overruns_total{stage=\"stt\"}"), 1);
  EXPECT_EQ(Sample(registry, "waav_stage_latency_seconds_count{stage=\"stt\"}"), 2);
  EXPECT_EQ(Sample(registry, "waav_stage_latency_seconds_bucket{stage=\"stt\",le=\"0.05\"}"), 1);
  EXPECT_EQ(Sample(registry, "waav_stage_latency_seconds_count{stage=\"encoder\"}"), 1);
  EXPECT_EQ(Sample(registry, "waav_end_to_end_budget_overruns_total"), 1);
  EXPECT_EQ(Sample(registry, "waav_end_to_end_latency_seconds_count"), 2);

  // A second facade on the same registry shares the families and updates the gauges.
  LatencyBudgets other;
  other.stt_ms = 40;
  auto second = StageMetrics::Create(&registry, other);
  ASSERT_TRUE(second.ok()) << second.status();
  (*second)->Observe(Stage::kStt, 0.045);
  EXPECT_EQ(Sample(registry, "waav_stage_budget_seconds{stage=\"stt\"}"), 0.04);
  EXPECT_EQ(Sample(registry, "waav_stage_budget_overruns_total{stage=\"stt\"}"), 2);
}

TEST(StageMetrics, RejectsInvalidBudgetsAndTakenNames) {
  Registry registry;
  LatencyBudgets bad;
  bad.tts_ms = -1;
  EXPECT_EQ(StageMetrics::Create(&registry, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  Registry taken;
  ASSERT_TRUE(taken.AddCounter({"waav_stage_budget_seconds", "something else", {}}).ok());
  EXPECT_EQ(StageMetrics::Create(&taken, LatencyBudgets()).status().code(),
            absl::StatusCode::kAlreadyExists);
}

// ---- StageTimer -------------------------------------------------------------------------------

TEST(StageTimer, StampsConsecutiveStages) {
  Registry registry;
  auto metrics = StageMetrics::Create(&registry, LatencyBudgets());
  ASSERT_TRUE(metrics.ok());
  StageTimer timer(metrics->get(), /*start_ns=*/1'000'000'000);
  EXPECT_DOUBLE_EQ(timer.StampAt(Stage::kCapture, 1'004'000'000), 0.004);
  EXPECT_DOUBLE_EQ(timer.StampAt(Stage::kPreprocessing, 1'010'000'000), 0.006);  // over 5 ms
  EXPECT_EQ(timer.StampAt(Stage::kStt, 1'009'000'000), 0);  // before the last stamp: 0 s
  EXPECT_EQ(timer.last_ns(), 1'010'000'000);
  EXPECT_DOUBLE_EQ(timer.StampAt(Stage::kStt, 1'030'000'000), 0.02);
  EXPECT_DOUBLE_EQ(timer.FinishAt(1'250'000'000), 0.25);

  EXPECT_EQ(Sample(registry, "waav_stage_latency_seconds_count{stage=\"capture\"}"), 1);
  EXPECT_EQ(Sample(registry, "waav_stage_budget_overruns_total{stage=\"preprocessing\"}"), 1);
  EXPECT_EQ(Sample(registry, "waav_stage_latency_seconds_count{stage=\"stt\"}"), 2);
  EXPECT_EQ(Sample(registry, "waav_end_to_end_budget_overruns_total"), 1);

  timer.ResetAt(5);
  EXPECT_EQ(timer.start_ns(), 5);
  EXPECT_EQ(timer.last_ns(), 5);

  // The real clock moves forward (no assertion on how far).
  StageTimer live(nullptr);
  EXPECT_GE(live.Stamp(Stage::kQueue), 0);
  EXPECT_GE(live.Finish(), 0);
  EXPECT_LE(live.start_ns(), StageClock::NowNs());
}

TEST(ScopedStage, ObservesOnce) {
  Registry registry;
  auto metrics = StageMetrics::Create(&registry, LatencyBudgets());
  ASSERT_TRUE(metrics.ok());
  {
    ScopedStage step(metrics->get(), Stage::kDecoderStep);
    EXPECT_GE(step.Stop(), 0);
    EXPECT_EQ(step.Stop(), 0);
  }
  { ScopedStage step(metrics->get(), Stage::kDecoderStep); }
  EXPECT_EQ(Sample(registry, "waav_stage_latency_seconds_count{stage=\"decoder_step\"}"), 2);
}

}  // namespace
}  // namespace waav::metrics
