// waavd scraped by a real Prometheus (Debian package `prometheus`): one daemon and one Prometheus
// server on loopback, two streams of real speech, then Prometheus's HTTP API is asked what it
// saw. Checks that the stage histograms count the work the clients saw, that the values are
// plausible, that the budget gauges are the configured budgets, that Prometheus holds exactly
// what the daemon served, and that every query of the Grafana dashboard evaluates against the
// series the daemon really exports (not only against the catalog in metric_names.h).
//
// The whole suite shares one setup (about 20 s on 2 cores): starting both servers, streaming,
// and waiting for a scrape after the work is done.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/audio/wav_reader.h"
#include "engine/metrics/latency_budgets.h"
#include "engine/metrics/stage.h"
#include "engine/models/vad/silero_vad.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/prometheus_process.h"
#include "tests/integration/promql_names.h"
#include "tests/integration/stream_client.h"
#include "tests/integration/waavd_process.h"
#include "tests/support/test_env.h"

namespace waav::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Budgets the daemon is started with: two changed, one inner step given a budget.
constexpr char kBudgetOverrides[] = "stt=60,margin=10,decoder_step=0.5";
constexpr int kStreams = 2;
constexpr double kPace = 2;  // audio sent at twice real time

double SecondsSinceEpoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "name{a="x",b="y"}" with the labels sorted, for comparing an exposition with Prometheus.
std::string SeriesKey(const std::string& name, std::map<std::string, std::string> labels) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) parts.push_back(absl::StrCat(k, "=\"", v, "\""));
  return absl::StrCat(name, "{", absl::StrJoin(parts, ","), "}");
}

// Series of an exposition in the text format 0.0.4 (as waavd writes it: no timestamps), by
// SeriesKey.
std::map<std::string, double> ParseExposition(const std::string& text) {
  std::map<std::string, double> series;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    const std::string value(line.substr(space + 1));
    const absl::string_view head = line.substr(0, space);
    const size_t brace = head.find('{');
    const std::string name(head.substr(0, brace));
    std::map<std::string, std::string> labels;
    // name="value",... with \\, \" and \n escaped inside the quotes.
    for (size_t i = brace == absl::string_view::npos ? head.size() : brace + 1;
         i < head.size() && head[i] != '}';) {
      const size_t eq = head.find('=', i);
      std::string label(head.substr(i, eq - i)), label_value;
      for (i = eq + 2; i < head.size() && head[i] != '"'; ++i) {
        if (head[i] == '\\' && i + 1 < head.size()) {
          ++i;
          label_value += head[i] == 'n' ? '\n' : head[i];
        } else {
          label_value += head[i];
        }
      }
      labels[label] = label_value;
      i += 1;                                         // the closing quote
      if (i < head.size() && head[i] == ',') i += 1;  // the next pair
    }
    series[SeriesKey(name, labels)] = std::strtod(value.c_str(), nullptr);
  }
  return series;
}

// The "result" of a query's answer; null when the answer has none (an error).
json ResultOf(const json& answer) {
  if (!answer.is_object() || !answer.contains("data") || !answer["data"].is_object()) return {};
  return answer["data"].value("result", json());
}

bool SameValue(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

class WaavdPrometheus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { setup_error_ = StartAndStream(); }
  static void TearDownTestSuite() {
    prometheus_.reset();
    daemon_.reset();
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_EQ(setup_error_, "");
  }
  void TearDown() override {
    if (!HasFailure()) return;
    if (daemon_ != nullptr) std::cerr << "---- waavd log ----\n" << daemon_->Log();
    if (prometheus_ != nullptr) std::cerr << "---- prometheus log ----\n" << prometheus_->Log();
  }

  // Returns "" or what went wrong; sets skip_reason_ when something the test needs is absent.
  static std::string StartAndStream() {
    const auto model = TinyEnModelDir();
    const auto jfk_path = SpeechFile("jfk.wav");
    const auto prometheus = FindProgram("prometheus");
    std::vector<std::string> absent;
    if (!model) absent.push_back("models/whisper-tiny.en (run scripts/setup)");
    if (!SileroVadDir()) absent.push_back("models/silero-vad (run scripts/setup)");
    if (!jfk_path) absent.push_back("shared speech data (../shared/data/speech/jfk.wav)");
    if (!prometheus) absent.push_back("prometheus on PATH (Debian package 'prometheus')");
    if (!absent.empty()) skip_reason_ = "absent: " + absl::StrJoin(absent, "; ");
    if (!skip_reason_.empty()) {
      std::cout << "skipping: " << skip_reason_ << "\n";
      return "";
    }
    auto jfk = audio::ReadWavFile(*jfk_path);
    if (!jfk.ok()) return jfk.status().ToString();
    if (jfk->sample_rate_hz != 16000) return "jfk.wav is not 16 kHz";
    // Silence around the speech: the utterance starts and ends inside the stream.
    std::vector<float> clip(8000, 0.0f);
    clip.insert(clip.end(), jfk->samples.begin(), jfk->samples.end());
    clip.insert(clip.end(), 32000, 0.0f);
    samples_per_stream_ = static_cast<int64_t>(clip.size());

    start_ = Clock::now();
    std::string error;
    daemon_ =
        WaavdProcess::Start(WAAVD_PATH, *model, {"--latency-budgets", kBudgetOverrides}, &error);
    if (daemon_ == nullptr) return error;
    Phase("waavd serving");
    prometheus_ = PrometheusProcess::Start(*prometheus, daemon_->metrics_address(), 1, &error);
    if (prometheus_ == nullptr) return error;
    Phase("prometheus ready");
    // No waiting for the first scrape: Prometheus syncs its targets about 5 s after it starts,
    // which falls inside the streaming (scrapes then see the counters rise, for rate()).
    StreamPlan plan;
    plan.config = Linear16Config(16000);
    plan.audio = ToLinear16(clip);
    plan.bytes_per_ms = 32;
    plan.chunk_bytes = 3200;  // 100 ms
    plan.pace = kPace;
    auto stub = v1::Recognizer::NewStub(daemon_->channel());
    runs_.resize(kStreams);
    std::vector<std::thread> clients;
    for (int i = 0; i < kStreams; ++i) {
      clients.emplace_back([&, i] {
        StreamPlan mine = plan;
        mine.config.set_request_id(absl::StrCat("prometheus-", i));
        runs_[i] = RunStream(*stub, mine);
      });
    }
    for (std::thread& t : clients) t.join();
    for (const StreamRun& run : runs_) {
      if (!run.status.ok()) return "a stream failed: " + run.status.error_message();
    }
    Phase("streams done");

    // The server counts a stream once its call is over on its side; then one backend sampling
    // round (200 ms) later every series is final.
    const bool settled = WaitFor(
        [] {
          const auto s = ParseExposition(daemon_->HttpGet("/metrics").body);
          const auto ok = s.find(R"(waav_streams_finished_total{kind="stt",outcome="ok"})");
          const auto active = s.find(R"(waav_streams_active{kind="stt"})");
          return ok != s.end() && ok->second == kStreams && active != s.end() &&
                 active->second == 0;
        },
        std::chrono::seconds(10));
    if (!settled) return "the daemon did not count both streams as finished";
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    served_ = daemon_->HttpGet("/metrics").body;
    wall_s_ = std::chrono::duration<double>(Clock::now() - start_).count();
    // A scrape that started after the work was over.
    const double quiet = SecondsSinceEpoch();
    if (!WaitFor([&] { return Latest("timestamp(up{job=\"waavd\"})") > quiet; },
                 std::chrono::seconds(10))) {
      return "no scrape after the streams ended";
    }
    Phase("scraped after the work");
    return "";
  }

  static void Phase(const char* what) {
    std::cout << "[" << std::chrono::duration<double>(Clock::now() - start_).count() << " s] "
              << what << "\n";
  }

  static bool WaitFor(const std::function<bool()>& done, std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // The value of a one-element instant vector, or NaN (for polling: no test failure).
  static double Latest(const std::string& expr) {
    const json answer = prometheus_->Query(expr);
    if (answer.value("status", "") != "success") return std::nan("");
    const json result = ResultOf(answer);
    if (!result.is_array() || result.size() != 1) return std::nan("");
    return std::strtod(result[0]["value"][1].get<std::string>().c_str(), nullptr);
  }

  // The value of `expr`, which must evaluate to exactly one sample.
  static double Value(const std::string& expr) {
    const json answer = prometheus_->Query(expr);
    EXPECT_EQ(answer.value("status", ""), "success") << expr << ": " << answer.dump();
    const json result = ResultOf(answer);
    EXPECT_TRUE(result.is_array() && result.size() == 1) << expr << ": " << answer.dump();
    if (!result.is_array() || result.size() != 1) return std::nan("");
    return std::strtod(result[0]["value"][1].get<std::string>().c_str(), nullptr);
  }

  static double StageCount(absl::string_view stage) {
    return Value(
        absl::StrCat("waav_stage_latency_seconds_count{job=\"waavd\",stage=\"", stage, "\"}"));
  }
  static double StageSum(absl::string_view stage) {
    return Value(
        absl::StrCat("waav_stage_latency_seconds_sum{job=\"waavd\",stage=\"", stage, "\"}"));
  }

  // What the clients saw.
  static int Results() {
    int n = 0;
    for (const StreamRun& run : runs_) n += run.CountResults();
    return n;
  }
  static double ClientSumSeconds(float (v1::ResultLatency::*field)() const) {
    double sum = 0;
    for (const StreamRun& run : runs_) {
      for (const Received& r : run.responses) {
        if (r.response.has_result()) sum += (r.response.result().latency().*field)() / 1e3;
      }
    }
    return sum;
  }

  static inline std::string skip_reason_;
  static inline std::string setup_error_;
  static inline std::unique_ptr<WaavdProcess> daemon_;
  static inline std::unique_ptr<PrometheusProcess> prometheus_;
  static inline std::vector<StreamRun> runs_;
  static inline int64_t samples_per_stream_ = 0;
  static inline Clock::time_point start_;
  static inline double wall_s_ = 0;   // from the daemon's start to the end of the work
  static inline std::string served_;  // the daemon's /metrics once the work was over
};

TEST_F(WaavdPrometheus, ScrapedEverySecond) {
  EXPECT_EQ(Value("up{job=\"waavd\"}"), 1);
  EXPECT_GE(Value("count_over_time(up{job=\"waavd\"}[5m])"), 3);
  EXPECT_EQ(Value("sum(scrape_samples_scraped{job=\"waavd\"})"),
            static_cast<double>(ParseExposition(served_).size()));
}

// Every series the daemon served once the work was over, with the same value, and no other.
TEST_F(WaavdPrometheus, PrometheusHoldsExactlyWhatTheDaemonServed) {
  const std::map<std::string, double> served = ParseExposition(served_);
  const json answer = prometheus_->Query("{job=\"waavd\",__name__=~\"waav_.+\"}");
  ASSERT_EQ(answer.value("status", ""), "success") << answer.dump();
  std::map<std::string, double> scraped;
  for (const json& sample : ResultOf(answer)) {
    std::map<std::string, std::string> labels;
    std::string name;
    for (const auto& [k, v] : sample["metric"].items()) {
      if (k == "__name__") {
        name = v.get<std::string>();
      } else if (k != "job" && k != "instance") {
        labels[k] = v.get<std::string>();
      }
    }
    scraped[SeriesKey(name, labels)] =
        std::strtod(sample["value"][1].get<std::string>().c_str(), nullptr);
  }
  EXPECT_EQ(scraped.size(), served.size());
  for (const auto& [key, value] : served) {
    const auto it = scraped.find(key);
    if (it == scraped.end()) {
      ADD_FAILURE() << key << " served but not in Prometheus";
    } else {
      EXPECT_TRUE(SameValue(it->second, value))
          << key << ": served " << value << ", scraped " << it->second;
    }
  }
  for (const auto& [key, value] : scraped) {
    EXPECT_TRUE(served.count(key) > 0) << key << " in Prometheus but not served";
  }
}

TEST_F(WaavdPrometheus, StreamCountsMatchTheWork) {
  EXPECT_EQ(Value(R"(waav_streams_started_total{job="waavd",kind="stt"})"), kStreams);
  EXPECT_EQ(Value(R"(waav_streams_finished_total{job="waavd",kind="stt",outcome="ok"})"), kStreams);
  EXPECT_EQ(Value(R"(sum(waav_streams_finished_total{job="waavd",outcome!="ok"}))"), 0);
  EXPECT_EQ(Value(R"(sum(waav_admission_rejections_total{job="waavd"}))"), 0);
  EXPECT_EQ(Value(R"(waav_streams_active{job="waavd",kind="stt"})"), 0);
  const double audio_s = static_cast<double>(kStreams * samples_per_stream_) / 16000;
  EXPECT_NEAR(Value(R"(waav_audio_processed_seconds_total{job="waavd",kind="stt"})"), audio_s,
              1e-6);
  // Compute time counts the decodes behind the results the clients got (encoder + decoder).
  EXPECT_NEAR(Value(R"(waav_compute_seconds_total{job="waavd",kind="stt"})"),
              ClientSumSeconds(&v1::ResultLatency::encoder_ms) +
                  ClientSumSeconds(&v1::ResultLatency::decoder_ms),
              1e-3);
  EXPECT_EQ(Value(R"(waav_stream_real_time_factor_count{job="waavd",kind="stt"})"), kStreams);
}

// Every decode (a partial or a final of one utterance) is observed once in each of the
// scheduler's steps; decodes whose text is empty send nothing, so there are at least as many
// as the results the clients got. Each result sent is observed once in processing and output.
TEST_F(WaavdPrometheus, StageCountsMatchTheDecodes) {
  const double decodes = StageCount("encoder");
  int finals = 0;
  for (const StreamRun& run : runs_) finals += static_cast<int>(run.Finals().size());
  EXPECT_GE(finals, kStreams);
  EXPECT_GE(decodes, Results());
  EXPECT_GE(Results(), finals);
  for (const char* stage : {"stt", "queue"}) {
    EXPECT_EQ(StageCount(stage), decodes) << stage;
  }
  // decoder_step: one observation per batch of windows decoded together (max_batch).
  EXPECT_GE(StageCount("decoder_step"), 1);
  EXPECT_LE(StageCount("decoder_step"), decodes);
  EXPECT_EQ(Value(R"(waav_end_to_end_latency_seconds_count{job="waavd"})"), decodes);
  EXPECT_EQ(StageCount("processing"), Results());
  EXPECT_EQ(StageCount("output"), Results());
  // The frontend runs the VAD once per batch of frames: at least once, at most once per frame.
  const double frames =
      static_cast<double>(kStreams * (samples_per_stream_ / vad::kVadFrameSamples));
  EXPECT_GE(StageCount("frontend"), 1);
  EXPECT_LE(StageCount("frontend"), frames);
  // Preprocessing is stamped once per frontend round, with ingest_wait.
  EXPECT_GE(StageCount("ingest_wait"), 1);
  EXPECT_EQ(StageCount("preprocessing"), StageCount("ingest_wait"));
  // Stages nothing feeds on this path (capture happens at the client; no TTS yet).
  for (const char* stage : {"capture", "tts"}) EXPECT_EQ(StageCount(stage), 0) << stage;
}

// Latencies are positive, each below the time the test ran, and agree with the latencies the
// daemon reported to the clients in each result.
TEST_F(WaavdPrometheus, StageLatenciesArePlausible) {
  for (const char* stage : {"encoder", "decoder_step", "stt", "queue", "processing", "output",
                            "frontend", "preprocessing"}) {
    const double count = StageCount(stage), sum = StageSum(stage);
    EXPECT_GT(sum, 0) << stage;
    EXPECT_LT(sum / count, wall_s_) << stage;
  }
  // The scheduler and the frontend are one thread each: their observations never overlap, so
  // their sums (and with them every observation) stay below the wall time.
  for (const char* stage : {"encoder", "decoder_step", "stt", "frontend"}) {
    EXPECT_LT(StageSum(stage), wall_s_) << stage;
  }
  EXPECT_LE(StageSum("encoder"), StageSum("stt"));
  // A round's preprocessing spans its ingest wait and its VAD batches.
  EXPECT_GE(StageSum("preprocessing"), StageSum("ingest_wait"));
  EXPECT_GE(StageSum("preprocessing"), StageSum("frontend"));
  EXPECT_LE(StageSum("decoder_step"), StageSum("stt"));
  // For the record (a loaded machine may legitimately queue work for seconds): observations
  // beyond the largest finite bucket, per stage.
  const json slow =
      prometheus_->Query(R"(waav_stage_latency_seconds_count{job="waavd"} - ignoring (le) )"
                         R"(waav_stage_latency_seconds_bucket{job="waavd",le="2.5"} > 0)");
  for (const json& sample : ResultOf(slow)) {
    std::cout << "stage " << sample["metric"].value("stage", "?") << ": "
              << sample["value"][1].get<std::string>() << " observation(s) over 2.5 s\n";
  }
  // What the clients were told is part of what Prometheus counts (it also has the decodes that
  // sent nothing); the proto's latencies are floats in ms, hence the tolerance.
  constexpr double kTolerance = 1e-3;
  EXPECT_GE(StageSum("encoder"), ClientSumSeconds(&v1::ResultLatency::encoder_ms) - kTolerance);
  EXPECT_GE(StageSum("stt"), ClientSumSeconds(&v1::ResultLatency::encoder_ms) +
                                 ClientSumSeconds(&v1::ResultLatency::decoder_ms) - kTolerance);
  EXPECT_GE(StageSum("queue"), ClientSumSeconds(&v1::ResultLatency::queue_ms) - kTolerance);
  EXPECT_NEAR(StageSum("processing"), ClientSumSeconds(&v1::ResultLatency::processing_ms),
              kTolerance);
  // The client's audio_to_result includes processing; the engine's end-to-end stops before it.
  EXPECT_GE(Value(R"(waav_end_to_end_latency_seconds_sum{job="waavd"})"),
            ClientSumSeconds(&v1::ResultLatency::audio_to_result_ms) -
                ClientSumSeconds(&v1::ResultLatency::processing_ms) - kTolerance);
  // Overruns are a subset of the observations.
  for (const metrics::Stage stage : metrics::kAllStages) {
    const std::string name(metrics::StageName(stage));
    const json answer = prometheus_->Query(
        absl::StrCat("waav_stage_budget_overruns_total{job=\"waavd\",stage=\"", name, "\"}"));
    if (ResultOf(answer).empty()) continue;  // no budget
    EXPECT_LE(
        Value(absl::StrCat("waav_stage_budget_overruns_total{job=\"waavd\",stage=\"", name, "\"}")),
        StageCount(name))
        << name;
  }
}

TEST_F(WaavdPrometheus, BudgetGaugesAreTheConfiguredBudgets) {
  metrics::LatencyBudgets budgets;
  ASSERT_TRUE(budgets.ApplyOverrides(kBudgetOverrides).ok());
  for (const metrics::Stage stage : metrics::kAllStages) {
    const std::string name(metrics::StageName(stage));
    const std::string gauge =
        absl::StrCat("waav_stage_budget_seconds{job=\"waavd\",stage=\"", name, "\"}");
    const double budget_ms = budgets.BudgetMs(stage);
    if (budget_ms > 0) {
      EXPECT_DOUBLE_EQ(Value(gauge), budget_ms / 1000) << name;
    } else {
      const json result = ResultOf(prometheus_->Query(gauge));
      EXPECT_TRUE(result.is_array() && result.empty()) << name << " has no budget";
    }
  }
  EXPECT_DOUBLE_EQ(Value("waav_stage_budget_seconds{job=\"waavd\",stage=\"stt\"}"), 0.06);
  EXPECT_DOUBLE_EQ(Value("waav_stage_budget_seconds{job=\"waavd\",stage=\"decoder_step\"}"),
                   0.0005);
  EXPECT_DOUBLE_EQ(Value("waav_end_to_end_budget_seconds{job=\"waavd\"}"),
                   budgets.end_to_end_ms / 1000);
}

TEST_F(WaavdPrometheus, BatchQueueDeviceAndModelSeries) {
  const double decodes = StageCount("encoder");
  // The encoder runs one window at a time; a batched decoder step serves every window of the
  // batch still decoding, so each decode is in at least one step and the steps' sizes add up to
  // at least the decodes.
  EXPECT_EQ(Value(R"(waav_batch_size_count{job="waavd",model="whisper_encoder"})"), decodes);
  EXPECT_EQ(Value(R"(waav_batch_size_sum{job="waavd",model="whisper_encoder"})"), decodes);
  const double decoder_steps =
      Value(R"(waav_batch_size_count{job="waavd",model="whisper_decoder"})");
  EXPECT_GE(decoder_steps, 1);
  const double decoder_rows = Value(R"(waav_batch_size_sum{job="waavd",model="whisper_decoder"})");
  EXPECT_GE(decoder_rows, decodes);
  EXPECT_GE(decoder_rows, decoder_steps);
  EXPECT_LE(decoder_rows, decoder_steps * 8);  // the test daemon's max_batch (default 8)
  // The VAD: one batch per frontend observation, and every full 32 ms frame of every stream
  // went through it exactly once.
  const double vad_batches = Value(R"(waav_batch_size_count{job="waavd",model="vad"})");
  EXPECT_EQ(vad_batches, StageCount("frontend"));
  EXPECT_EQ(Value(R"(waav_batch_size_sum{job="waavd",model="vad"})"),
            static_cast<double>(kStreams * (samples_per_stream_ / vad::kVadFrameSamples)));
  // A VAD batch holds the frames of at most every open stream.
  EXPECT_EQ(Value(absl::StrCat("waav_batch_size_bucket{job=\"waavd\",model=\"vad\",le=\"", kStreams,
                               "\"}")),
            vad_batches);

  // Both queues exist and are empty at rest.
  EXPECT_EQ(Value(R"(waav_queue_depth{job="waavd",queue="ingest"})"), 0);
  EXPECT_EQ(Value(R"(waav_queue_depth{job="waavd",queue="scheduler"})"), 0);

  // Every decoder step and VAD batch issues at least one kernel; this build's CPU backend
  // captures no graphs on this path.
  const std::string backend = "cpu";
  EXPECT_GE(
      Value(absl::StrCat("waav_kernel_launches_total{job=\"waavd\",backend=\"", backend, "\"}")),
      decoder_steps + vad_batches);
  EXPECT_EQ(
      Value(absl::StrCat("waav_graph_replays_total{job=\"waavd\",backend=\"", backend, "\"}")), 0);
  const double used = Value(absl::StrCat("waav_device_memory_used_bytes{job=\"waavd\",backend=\"",
                                         backend, "\",device=\"0\"}"));
  const double capacity = Value(absl::StrCat(
      "waav_device_memory_capacity_bytes{job=\"waavd\",backend=\"", backend, "\",device=\"0\"}"));
  // At least the two copies of tiny.en's weights (the streaming engine's and the offline
  // worker's, ~75 MB each in f16) are held.
  EXPECT_GT(used, 2 * 70e6);
  EXPECT_LT(used, capacity);

  const double whisper_load = Value(
      R"(waav_model_load_duration_seconds{job="waavd",model="whisper-tiny.en",backend="cpu"})");
  EXPECT_GT(whisper_load, 0);
  EXPECT_LT(whisper_load, wall_s_);
  EXPECT_GT(
      Value(R"(waav_model_load_duration_seconds{job="waavd",model="silero_vad",backend="cpu"})"),
      0);
  EXPECT_EQ(Value(R"(count(waav_build_info{job="waavd"}))"), 1);
}

// ---- The Grafana dashboard against the live daemon ---------------------------------------------

struct DashboardQuery {
  std::string where;
  std::string expr;
};

std::vector<DashboardQuery> DashboardQueries(const json& dashboard) {
  std::vector<DashboardQuery> queries;
  std::function<void(const json&)> walk = [&](const json& panels) {
    for (const json& panel : panels) {
      const std::string where =
          absl::StrCat("panel ", panel.value("id", -1), " '", panel.value("title", ""), "'");
      for (const json& target : panel.value("targets", json::array())) {
        queries.push_back(
            {absl::StrCat(where, " ", target.value("refId", "?")), target.value("expr", "")});
      }
      walk(panel.value("panels", json::array()));
    }
  };
  walk(dashboard.value("panels", json::array()));
  static const std::regex label_values(R"(^\s*label_values\((.*),\s*(\w+)\)\s*$)");
  for (const json& variable : dashboard["templating"].value("list", json::array())) {
    if (variable.value("type", "") != "query") continue;
    const json& q = variable["query"];
    const std::string query = q.is_object() ? q.value("query", "") : q.get<std::string>();
    std::smatch m;
    queries.push_back({absl::StrCat("variable $", variable.value("name", "")),
                       std::regex_match(query, m, label_values) ? m[1].str() : query});
  }
  return queries;
}

// Every panel query is evaluated by the real Prometheus: it must parse, succeed and return data,
// and every metric it names must be one the daemon exported, not merely one of the catalog.
TEST_F(WaavdPrometheus, DashboardQueriesEvaluateAgainstExportedSeries) {
  std::ifstream in(SourceDir() + "/deploy/grafana/waav-dashboard.json");
  ASSERT_TRUE(in) << "deploy/grafana/waav-dashboard.json not readable";
  const json dashboard = json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(dashboard.is_discarded()) << "waav-dashboard.json is not JSON";

  const PrometheusProcess::HttpResponse names_answer =
      prometheus_->Get("/api/v1/label/__name__/values");
  ASSERT_EQ(names_answer.status, 200) << names_answer.body;
  const json names = json::parse(names_answer.body, nullptr, false);
  ASSERT_FALSE(names.is_discarded());
  std::set<std::string> exported;
  for (const json& n : names["data"]) exported.insert(n.get<std::string>());
  ASSERT_TRUE(exported.count("waav_stage_latency_seconds_count")) << names_answer.body;

  // Grafana's variables, as a person looking at this daemon would have them. The rate interval
  // covers the whole test, so rate() sees the streams.
  const std::map<std::string, std::string> variables = {{"__rate_interval", "1m"},
                                                        {"__interval", "15s"},
                                                        {"__range", "5m"},
                                                        {"instance", daemon_->metrics_address()},
                                                        {"stage", "stt"}};
  const std::vector<DashboardQuery> queries = DashboardQueries(dashboard);
  ASSERT_GE(queries.size(), 20u);
  std::set<std::string> used;
  for (const DashboardQuery& q : queries) {
    std::vector<std::string> unknown;
    const std::string expr = SubstituteGrafanaVariables(q.expr, variables, &unknown);
    EXPECT_TRUE(unknown.empty()) << q.where << ": unknown variable(s) "
                                 << absl::StrJoin(unknown, ", ") << " in " << q.expr;
    for (const std::string& name : MetricNamesIn(expr)) {
      used.insert(name);
      EXPECT_TRUE(exported.count(name) > 0)
          << q.where << ": '" << name << "' is not exported by waavd: " << q.expr;
    }
    const json answer = prometheus_->Query(expr);
    EXPECT_EQ(answer.value("status", ""), "success") << q.where << ": " << expr << "\n"
                                                     << answer.dump();
    const json result = ResultOf(answer);
    EXPECT_TRUE(result.is_array() && !result.empty())
        << q.where << " shows no data: " << expr << "\n"
        << answer.dump();
  }
  std::cout << queries.size()
            << " dashboard queries evaluated; metrics used: " << absl::StrJoin(used, " ") << "\n";
}

// ---- The PromQL helpers (no servers needed) -----------------------------------------------------

TEST(PromqlNames, FindsSelectedMetricsOnly) {
  EXPECT_EQ(
      MetricNamesIn(
          R"(histogram_quantile(0.99, sum by (stage, le) (rate(a_bucket{instance=~"x",stage="$stage"}[5m]))) / on (stage) max by (stage) (b))"),
      (std::vector<std::string>{"a_bucket", "b"}));
  EXPECT_EQ(MetricNamesIn("up{job=\"waavd\"} and count_over_time(c[1m]) > 0.5 or d offset 5m"),
            (std::vector<std::string>{"up", "c", "d"}));
  EXPECT_EQ(MetricNamesIn("sum without (le) (rate(x_total[1m] @ 100))"),
            (std::vector<std::string>{"x_total"}));
  EXPECT_TRUE(MetricNamesIn("vector(1) + 2e3").empty());
}

TEST(PromqlNames, SubstitutesGrafanaVariables) {
  std::vector<std::string> unknown;
  EXPECT_EQ(SubstituteGrafanaVariables(
                "rate(x{i=~\"$instance\",s=\"${stage:raw}\"}[$__rate_interval])",
                {{"instance", "h:1"}, {"stage", "stt"}, {"__rate_interval", "1m"}}, &unknown),
            "rate(x{i=~\"h:1\",s=\"stt\"}[1m])");
  EXPECT_TRUE(unknown.empty());
  EXPECT_EQ(SubstituteGrafanaVariables("x{a=\"$nope\"}", {}, &unknown), "x{a=\"$nope\"}");
  EXPECT_EQ(unknown, (std::vector<std::string>{"nope"}));
}

}  // namespace
}  // namespace waav::testing
