#include "load-tests/load_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "waav/v1/audio.pb.h"

namespace waav::load {
namespace {

std::string Triple(const Summary& s) {
  if (s.count == 0) return "-";
  return absl::StrFormat("%.0f / %.0f / %.0f", s.p50, s.p95, s.p99);
}

std::string MaxOrDash(const Summary& s) {
  return s.count == 0 ? "-" : absl::StrFormat("%.0f", s.max);
}

std::string Errors(const StepReport& step) {
  if (step.errors.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [name, n] : step.errors) parts.push_back(absl::StrCat(name, " x", n));
  return absl::StrJoin(parts, ", ");
}

nlohmann::json ReferenceWordsJson(const StepReport& step) {
  nlohmann::json words = nlohmann::json::array();
  for (const ReferenceWordReport& w : step.reference_words) {
    words.push_back({{"file", w.file},
                     {"index", w.index},
                     {"word", w.text},
                     {"end_ms", w.end_ms},
                     {"measured", w.measured},
                     {"first_shown_by_final", w.first_shown_by_final},
                     {"first_partial_ms", SummaryJson(w.first_partial_ms)},
                     {"final_ms", SummaryJson(w.final_ms)}});
  }
  return words;
}

}  // namespace

std::string DescribeRun(const LoadOptions& options,
                        const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio) {
  double audio_s = 0;
  for (const auto& a : audio) audio_s += static_cast<double>(a->duration_us) / 1e6;
  const double speed = options.stream.speed;
  std::string out = absl::StrFormat(
      "server %s; %d file(s), %.2f s of audio (%s, %d ms chunks%s)\n", options.server, audio.size(),
      audio_s, audio.empty() ? "-" : v1::AudioEncoding_Name(audio.front()->format.encoding()),
      options.audio.chunk_ms,
      options.audio.tail_silence_ms > 0
          ? absl::StrFormat(", %d ms of silence appended", options.audio.tail_silence_ms)
          : "");
  absl::StrAppendFormat(
      &out, "pace: %s; per slot: %s; slot starts %s; %s; interim %s, words %s\n",
      speed > 0 ? absl::StrFormat("%.2fx real time", speed) : "as fast as possible (--fast)",
      options.duration_s > 0 ? absl::StrFormat("streams for %.0f s", options.duration_s)
                             : absl::StrFormat("%d stream(s)", options.repetitions),
      options.spread_ms > 0 ? absl::StrFormat("spread over %.0f ms", options.spread_ms)
                            : absl::StrFormat("%.0f ms apart", options.stagger_ms),
      options.connections > 0 ? absl::StrFormat("%d shared connection(s)", options.connections)
                              : "one connection per slot",
      options.stream.interim_results ? "on" : "off",
      options.stream.word_time_offsets ? "requested" : "not requested");
  const KeepUpCriteria& c = options.criteria;
  absl::StrAppendFormat(&out,
                        "keeps up: every stream OK, every final <= %.0f ms after its utterance's "
                        "end, backlog <= %.0f ms, send delay <= %.0f ms",
                        c.max_final_ms, c.max_backlog_ms, c.max_send_delay_ms);
  if (c.max_first_partial_p99_ms > 0) {
    absl::StrAppendFormat(&out, ", first-partial p99 <= %.0f ms", c.max_first_partial_p99_ms);
  }
  out += "\n";
  return out;
}

std::string DescribeReference(const LoadOptions& options, const RampReport& ramp) {
  int words = 0;
  int utterances = 0;
  size_t matched = 0, unmatched = 0;
  for (const StepReport& s : ramp.steps) {
    words += s.streams_word_reference;
    utterances += s.streams_utterance_reference;
    matched += s.reference_matched;
    unmatched += s.reference_unmatched;
  }
  if (words > 0 && utterances == 0 && !options.reference_words.empty()) {
    return absl::StrFormat(
        "latency reference: the end of each word in the reference word times (%s): %d of %d "
        "final words matched one (the others are not measured)",
        options.reference_words_path, matched, matched + unmatched);
  }
  if (words > 0 && utterances == 0) {
    return "latency reference: the end of each word (the server's word time offsets)";
  }
  if (utterances > 0 && words == 0) {
    return "latency reference: the end of each utterance (SPEECH_ENDED offset): the server sent "
           "no word time offsets, so first-partial and final latencies are per utterance";
  }
  if (words == 0) return "latency reference: none (no final results)";
  return absl::StrFormat(
      "latency reference: mixed: %d stream(s) at word ends, %d at utterance ends (no word "
      "offsets)",
      words, utterances);
}

// Columns: N, streams, ok, errors, first partial and final latency (p50/p95/p99 ms), the
// slowest final after its utterance's end, the largest backlog and send delay (ms), median RTF,
// verdict.
constexpr char kRowFormat[] = "%6s %7s %5s  %-22s %-19s %-19s %-19s %9s %8s %8s %6s  %s\n";

std::string StepTableHeader() {
  return absl::StrFormat(kRowFormat, "N", "streams", "ok", "errors", "first partial ms",
                         "stable ms", "final ms", "slowest", "max", "max send", "RTF", "keeps") +
         absl::StrFormat(kRowFormat, "", "", "", "", "p50 / p95 / p99", "p50 / p95 / p99",
                         "p50 / p95 / p99", "final ms", "backlog", "delay", "p50", "up");
}

std::string StepTableRow(const StepReport& step) {
  return absl::StrFormat(kRowFormat, absl::StrCat(step.concurrency), absl::StrCat(step.streams),
                         absl::StrCat(step.streams_ok), Errors(step), Triple(step.first_partial_ms),
                         Triple(step.first_stable_ms), Triple(step.final_ms),
                         MaxOrDash(step.utterance_final_ms), MaxOrDash(step.backlog_ms),
                         MaxOrDash(step.send_delay_ms),
                         step.rtf.count ? absl::StrFormat("%.3f", step.rtf.p50) : "-",
                         !step.paced     ? "n/a"
                         : step.keeps_up ? "yes"
                                         : "NO");
}

std::string StageTable(const StepReport& step) {
  std::string out =
      absl::StrFormat("  server stages at N=%d (ResultLatency, ms):\n", step.concurrency);
  absl::StrAppendFormat(&out, "    %-26s %8s %8s %8s %8s %8s\n", "stage", "p50", "p95", "p99",
                        "max", "count");
  for (const auto& [name, s] : step.server_stages) {
    absl::StrAppendFormat(&out, "    %-26s %8.1f %8.1f %8.1f %8.1f %8d\n", name, s.p50, s.p95,
                          s.p99, s.max, s.count);
  }
  return out;
}

std::string LateWordTable(const StepReport& step, size_t rows) {
  std::vector<const ReferenceWordReport*> words;
  for (const ReferenceWordReport& w : step.reference_words) {
    if (w.measured > 0) words.push_back(&w);
  }
  if (words.empty() || rows == 0) return "";
  std::stable_sort(words.begin(), words.end(),
                   [](const ReferenceWordReport* a, const ReferenceWordReport* b) {
                     return a->first_partial_ms.p95 > b->first_partial_ms.p95;
                   });
  if (words.size() > rows) words.resize(rows);
  std::string out = absl::StrFormat(
      "  latest words at N=%d (of %d reference words; first partial p95, then the rest):\n",
      step.concurrency, step.reference_words.size());
  absl::StrAppendFormat(&out, "    %-16s %-14s %8s %9s %9s  %-20s %9s\n", "file", "word", "end ms",
                        "measured", "in final", "first p50 / p95 / max", "final p50");
  for (const ReferenceWordReport* w : words) {
    absl::StrAppendFormat(&out, "    %-16s %-14s %8d %9d %9d  %-20s %9.0f\n", w->file.substr(0, 16),
                          absl::StrCat("#", w->index, " ", w->text).substr(0, 14), w->end_ms,
                          w->measured, w->first_shown_by_final,
                          absl::StrFormat("%.0f / %.0f / %.0f", w->first_partial_ms.p50,
                                          w->first_partial_ms.p95, w->first_partial_ms.max),
                          w->final_ms.p50);
  }
  return out;
}

std::string DescribeVerdict(const RampReport& ramp) {
  std::string out;
  if (ramp.largest_keeping_up > 0) {
    out = absl::StrFormat("largest N that keeps up: %d", ramp.largest_keeping_up);
  } else {
    out = "no step kept up";
  }
  for (const StepReport& s : ramp.steps) {
    if (!s.keeps_up) {
      absl::StrAppendFormat(&out, "\nN=%d does not keep up: %s", s.concurrency,
                            absl::StrJoin(s.failures, "; "));
      break;
    }
  }
  return out + "\n";
}

nlohmann::json SummaryJson(const Summary& s) {
  if (s.count == 0) return nullptr;
  return {{"count", s.count}, {"min", s.min}, {"max", s.max}, {"mean", s.mean},
          {"p50", s.p50},     {"p95", s.p95}, {"p99", s.p99}};
}

nlohmann::json StepJson(const StepReport& step) {
  nlohmann::json stages = nlohmann::json::object();
  for (const auto& [name, s] : step.server_stages) stages[name] = SummaryJson(s);
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [name, n] : step.errors) {
    errors[name] = {{"streams", n}, {"example", step.error_sample.at(name)}};
  }
  return {{"concurrency", step.concurrency},
          {"streams", step.streams},
          {"streams_ok", step.streams_ok},
          {"errors", errors},
          {"streams_word_reference", step.streams_word_reference},
          {"streams_utterance_reference", step.streams_utterance_reference},
          {"reference_words_matched", step.reference_matched},
          {"reference_words_unmatched", step.reference_unmatched},
          {"finals", step.finals},
          {"words", step.words},
          {"first_partial_ms", SummaryJson(step.first_partial_ms)},
          {"first_stable_ms", SummaryJson(step.first_stable_ms)},
          {"final_ms", SummaryJson(step.final_ms)},
          {"utterance_final_ms", SummaryJson(step.utterance_final_ms)},
          {"rtf", SummaryJson(step.rtf)},
          {"backlog_ms", SummaryJson(step.backlog_ms)},
          {"send_delay_ms", SummaryJson(step.send_delay_ms)},
          {"reference_words", ReferenceWordsJson(step)},
          {"server_stages_ms", stages},
          {"audio_s", step.audio_s},
          {"wall_s", step.wall_s},
          {"paced", step.paced},
          {"keeps_up", step.keeps_up},
          {"failures", step.failures}};
}

nlohmann::json ReportJson(const LoadOptions& options,
                          const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio,
                          const RampReport& ramp) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& a : audio) {
    files.push_back({{"file", a->name},
                     {"duration_s", static_cast<double>(a->duration_us) / 1e6},
                     {"encoding", v1::AudioEncoding_Name(a->format.encoding())},
                     {"chunks", a->chunks.size()}});
  }
  const KeepUpCriteria& c = options.criteria;
  nlohmann::json opts = {{"server", options.server},
                         {"speed", options.stream.speed},
                         {"chunk_ms", options.audio.chunk_ms},
                         {"tail_silence_ms", options.audio.tail_silence_ms},
                         {"repetitions", options.repetitions},
                         {"duration_s", options.duration_s},
                         {"stagger_ms", options.stagger_ms},
                         {"spread_ms", options.spread_ms},
                         {"connections", options.connections},
                         {"interim_results", options.stream.interim_results},
                         {"word_time_offsets", options.stream.word_time_offsets},
                         {"model", options.stream.model},
                         {"language", options.stream.language},
                         {"silence_ms", options.stream.silence_ms},
                         {"match_slack_ms", options.match_slack_ms},
                         {"reference_words", options.reference_words_path},
                         {"keep_up",
                          {{"max_final_ms", c.max_final_ms},
                           {"max_backlog_ms", c.max_backlog_ms},
                           {"max_send_delay_ms", c.max_send_delay_ms},
                           {"max_first_partial_p99_ms", c.max_first_partial_p99_ms}}}};
  nlohmann::json steps = nlohmann::json::array();
  for (const StepReport& s : ramp.steps) steps.push_back(StepJson(s));
  return {{"tool", "waav-load"}, {"options", opts},
          {"files", files},      {"latency_reference", DescribeReference(options, ramp)},
          {"steps", steps},      {"largest_concurrency_keeping_up", ramp.largest_keeping_up}};
}

}  // namespace waav::load
