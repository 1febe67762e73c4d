// The step verdict (Aggregate), the ramp parser, and the shape of the text and JSON reports.
#include "load-tests/load_report.h"

#include "gtest/gtest.h"

namespace waav::load {
namespace {

StreamRecord OkStream(double final_after_end_s, double backlog_ms = 50, double send_delay_ms = 2) {
  StreamRecord r;
  r.speed = 1;
  r.audio_us = 2'000'000;
  r.done_s = 2.0 + final_after_end_s;
  r.max_backlog_ms = backlog_ms;
  r.max_send_delay_ms = send_delay_ms;
  ObservedResult interim;
  interim.received_s = 1.3;
  interim.end_ms = 1250;
  interim.has_text = true;
  interim.words = {{"one", 1000}};
  interim.latency.set_audio_to_result_ms(120);
  ObservedResult final = interim;
  final.is_final = true;
  final.end_ms = 1000;
  final.received_s = 1.0 + final_after_end_s;
  final.latency.set_audio_to_result_ms(700);
  final.latency.set_decoder_ms(30);
  r.results = {interim, final};
  return r;
}

TEST(AggregateTest, KeepsUpWhenEveryCriterionHolds) {
  LoadOptions options;
  const StepReport step = Aggregate(2, {OkStream(0.8), OkStream(1.2)}, options, 3.5);
  EXPECT_TRUE(step.keeps_up) << step.failures.size();
  EXPECT_EQ(step.streams, 2);
  EXPECT_EQ(step.streams_ok, 2);
  EXPECT_EQ(step.finals, 2u);
  EXPECT_EQ(step.words, 2u);
  EXPECT_EQ(step.streams_word_reference, 2);
  EXPECT_NEAR(step.final_ms.max, 1200, 1e-6);
  EXPECT_NEAR(step.first_partial_ms.p50, 300, 1e-6);
  EXPECT_NEAR(step.rtf.p50, 1.5, 1e-9);
  EXPECT_DOUBLE_EQ(step.audio_s, 4);
  EXPECT_EQ(step.server_stages.at("audio_to_result (final)").count, 2u);
  EXPECT_EQ(step.server_stages.at("audio_to_result (interim)").count, 2u);
  EXPECT_EQ(step.server_stages.at("decoder").count, 2u);  // zeros (step did not run) left out
  EXPECT_EQ(step.server_stages.count("encoder"), 0u);
}

TEST(AggregateTest, EachCriterionCanFailTheStep) {
  LoadOptions options;
  options.criteria.max_first_partial_p99_ms = 250;
  StreamRecord failed = OkStream(0.5);
  failed.code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  failed.message = "limit of 4 streams";
  const StepReport step = Aggregate(
      4, {OkStream(2.5), OkStream(0.5, 1500), OkStream(0.5, 10, 1200), failed}, options, 5);
  EXPECT_FALSE(step.keeps_up);
  ASSERT_EQ(step.failures.size(), 5u);
  EXPECT_EQ(step.failures[0], "1 of 4 streams failed (RESOURCE_EXHAUSTED x1)");
  EXPECT_NE(step.failures[1].find("2500 ms after its utterance's end (limit 2000 ms)"),
            std::string::npos);
  EXPECT_NE(step.failures[2].find("backlog reached 1500 ms"), std::string::npos);
  EXPECT_NE(step.failures[3].find("1200 ms after it was due"), std::string::npos);
  EXPECT_NE(step.failures[4].find("first-partial p99 300 ms (limit 250 ms)"), std::string::npos);
  EXPECT_EQ(step.errors.at("RESOURCE_EXHAUSTED"), 1);
  EXPECT_EQ(step.error_sample.at("RESOURCE_EXHAUSTED"), "limit of 4 streams");
}

TEST(AggregateTest, NoFinalsOrNoPacingGivesNoVerdict) {
  LoadOptions options;
  StreamRecord empty;
  empty.speed = 1;
  StepReport step = Aggregate(1, {empty}, options, 1);
  EXPECT_FALSE(step.keeps_up);
  EXPECT_EQ(step.failures, std::vector<std::string>{"no final results to judge by"});
  options.stream.speed = 0;
  StreamRecord fast = OkStream(0.1);
  fast.speed = 0;
  step = Aggregate(1, {fast}, options, 1);
  EXPECT_FALSE(step.paced);
  EXPECT_FALSE(step.keeps_up);
  EXPECT_EQ(step.final_ms.count, 0u);
  EXPECT_NE(StepTableRow(step).find("n/a"), std::string::npos);
  EXPECT_FALSE(Aggregate(1, {}, LoadOptions{}, 0).keeps_up);
}

// With reference words, each reference word's latencies over the step's streams: the late one
// is named first in the table, a word no stream said is listed unmeasured.
TEST(AggregateTest, ReferenceWordsAreReportedOneByOne) {
  LoadOptions options;
  options.reference_words["a.wav"] = {{"one", 1000}, {"two", 1500}, {"three", 2500}};
  std::vector<StreamRecord> records;
  for (int i = 0; i < 3; ++i) {
    StreamRecord r = OkStream(0.8);
    r.file = "dir/a.wav";
    // "one" shown by the interim at 1.3 s; "two" only by the final, which comes at 1.8 + i / 10.
    r.results[1].received_s = 1.8 + i / 10.0;
    r.results[1].words = {{"one", 1000}, {"two", 1500}};
    records.push_back(r);
  }
  const StepReport step = Aggregate(3, records, options, 3.0);
  ASSERT_EQ(step.reference_words.size(), 3u);
  const ReferenceWordReport& one = step.reference_words[0];
  const ReferenceWordReport& two = step.reference_words[1];
  EXPECT_EQ(one.file, "a.wav");
  EXPECT_EQ(one.text, "one");
  EXPECT_EQ(one.measured, 3u);
  EXPECT_EQ(one.first_shown_by_final, 0u);
  EXPECT_NEAR(one.first_partial_ms.max, 300, 1e-6);
  EXPECT_EQ(two.index, 1u);
  EXPECT_EQ(two.end_ms, 1500u);
  EXPECT_EQ(two.first_shown_by_final, 3u);
  EXPECT_NEAR(two.first_partial_ms.min, 300, 1e-6);
  EXPECT_NEAR(two.first_partial_ms.max, 500, 1e-6);
  EXPECT_NEAR(two.final_ms.p50, 400, 1e-6);
  EXPECT_EQ(step.reference_words[2].measured, 0u);
  EXPECT_EQ(step.reference_words[2].first_partial_ms.count, 0u);

  const std::string table = LateWordTable(step, 1);
  EXPECT_NE(table.find("#1 two"), std::string::npos) << table;
  EXPECT_EQ(table.find("#0 one"), std::string::npos) << table;
  EXPECT_NE(LateWordTable(step, 5).find("#0 one"), std::string::npos);
  EXPECT_EQ(LateWordTable(step, 5).find("three"), std::string::npos);  // nothing measured
  EXPECT_EQ(LateWordTable(Aggregate(1, {OkStream(0.7)}, LoadOptions{}, 2.0), 5), "");

  const nlohmann::json words = StepJson(step)["reference_words"];
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[1]["word"], "two");
  EXPECT_EQ(words[1]["first_shown_by_final"], 3);
  EXPECT_TRUE(words[2]["first_partial_ms"].is_null());
}

TEST(ParseRampTest, IncreasingPositiveCounts) {
  EXPECT_EQ(*ParseRamp("1,2,4,8"), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(*ParseRamp(" 3 , 10 "), (std::vector<int>{3, 10}));
  for (const char* bad : {"", "1,,2", "0,1", "2,1", "1,1", "a", "1.5", "-1", "100001",
                          "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21"}) {
    EXPECT_FALSE(ParseRamp(bad).ok()) << bad;
  }
  EXPECT_NE(ParseRamp("4,2").status().message().find("must increase"), std::string::npos);
}

TEST(ReportTest, TablesAndJsonHaveEveryField) {
  LoadOptions options;
  options.server = "127.0.0.1:50051";
  options.files = {"a.wav"};
  auto audio = std::make_shared<cli::ClientAudio>();
  audio->name = "a.wav";
  audio->duration_us = 2'000'000;
  audio->format.set_encoding(v1::AUDIO_ENCODING_LINEAR16);
  RampReport ramp;
  ramp.steps.push_back(Aggregate(1, {OkStream(0.7)}, options, 2.7));
  StreamRecord failed = OkStream(0.7);
  failed.code = grpc::StatusCode::UNAVAILABLE;
  failed.message = "connection refused";
  ramp.steps.push_back(Aggregate(2, {OkStream(0.7), failed}, options, 2.7));
  ramp.largest_keeping_up = 1;

  const std::string header = StepTableHeader();
  EXPECT_NE(header.find("first partial ms"), std::string::npos);
  EXPECT_NE(header.find("p50 / p95 / p99"), std::string::npos);
  EXPECT_NE(StepTableRow(ramp.steps[0]).find("yes"), std::string::npos);
  EXPECT_NE(StepTableRow(ramp.steps[1]).find("UNAVAILABLE x1"), std::string::npos);
  EXPECT_NE(StepTableRow(ramp.steps[1]).find("NO"), std::string::npos);
  EXPECT_NE(DescribeVerdict(ramp).find("largest N that keeps up: 1\nN=2 does not keep up: 1 of 2 "
                                       "streams failed (UNAVAILABLE x1)"),
            std::string::npos)
      << DescribeVerdict(ramp);
  EXPECT_NE(DescribeReference(LoadOptions{}, ramp).find("end of each word"), std::string::npos);
  EXPECT_NE(StageTable(ramp.steps[0]).find("audio_to_result (final)"), std::string::npos);
  EXPECT_NE(DescribeRun(options, {audio}).find("AUDIO_ENCODING_LINEAR16"), std::string::npos);

  const nlohmann::json j = ReportJson(options, {audio}, ramp);
  EXPECT_EQ(j["tool"], "waav-load");
  EXPECT_EQ(j["largest_concurrency_keeping_up"], 1);
  EXPECT_EQ(j["options"]["server"], "127.0.0.1:50051");
  EXPECT_EQ(j["options"]["keep_up"]["max_final_ms"], 2000.0);
  EXPECT_EQ(j["files"][0]["duration_s"], 2.0);
  ASSERT_EQ(j["steps"].size(), 2u);
  for (const char* key : {"concurrency",
                          "streams",
                          "streams_ok",
                          "errors",
                          "finals",
                          "words",
                          "first_partial_ms",
                          "final_ms",
                          "utterance_final_ms",
                          "rtf",
                          "backlog_ms",
                          "send_delay_ms",
                          "server_stages_ms",
                          "audio_s",
                          "wall_s",
                          "paced",
                          "keeps_up",
                          "failures",
                          "streams_word_reference",
                          "streams_utterance_reference",
                          "reference_words"}) {
    EXPECT_TRUE(j["steps"][0].contains(key)) << key;
  }
  for (const char* key : {"count", "min", "max", "mean", "p50", "p95", "p99"}) {
    EXPECT_TRUE(j["steps"][0]["final_ms"].contains(key)) << key;
  }
  EXPECT_EQ(j["steps"][1]["errors"]["UNAVAILABLE"]["streams"], 1);
  EXPECT_EQ(j["steps"][1]["errors"]["UNAVAILABLE"]["example"], "connection refused");
  EXPECT_EQ(j["steps"][1]["keeps_up"], false);
  EXPECT_TRUE(SummaryJson(Summary{}).is_null());
  // The JSON survives a round trip through text.
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

}  // namespace
}  // namespace waav::load
