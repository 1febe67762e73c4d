// waav-load: N concurrent real-time streams against waavd; latency percentiles from the end of
// each word to its first partial and to its final, server stage latencies, RTF, errors by status
// code; a ramp over N reports the largest N that keeps up. docs/client.md describes it.
#include <fstream>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "load-tests/load_report.h"
#include "load-tests/load_runner.h"
#include "tools/waav/grpc_client.h"

namespace {

struct Args {
  waav::load::LoadOptions options;
  std::string encoding = "auto";
  int streams = 1;
  std::string ramp;
  bool fast = false;
  bool no_interim = false;
  bool no_words = false;
  bool keep_going = false;
  double settle_s = 2;
  std::string json_out;
  bool verbose = false;
};

void AddOptions(CLI::App& app, Args* a) {
  waav::load::LoadOptions& o = a->options;
  o.server = waav::cli::kDefaultServer;
  app.add_option("files", o.files, "WAV (or FLAC/Ogg Opus) files; streams take them in turn")
      ->required();
  app.add_option("--server", o.server, "waavd address, HOST:PORT")->capture_default_str();
  app.add_option("-n,--streams", a->streams, "Concurrent streams (one step)")
      ->capture_default_str();
  app.add_option("--ramp", a->ramp,
                 "Steps of concurrent streams, e.g. 1,2,4,8,16; reports the largest that keeps "
                 "up (overrides --streams)");
  app.add_flag("--keep-going", a->keep_going,
               "Run every ramp step, not stopping at the first that does not keep up");
  app.add_option("--settle-s", a->settle_s, "Pause between ramp steps, s")->capture_default_str();
  app.add_option("--speed", o.stream.speed, "Pace at this multiple of real time")
      ->capture_default_str();
  app.add_flag("--fast", a->fast, "No pacing: as fast as flow control allows (RTF only)");
  app.add_option("--chunk-ms", o.audio.chunk_ms, "Audio per message, ms")->capture_default_str();
  app.add_option("--encoding", a->encoding,
                 absl::StrCat("What to send: ", waav::cli::kEncodingChoices))
      ->capture_default_str();
  app.add_option("--tail-silence-ms", o.audio.tail_silence_ms,
                 "Silence appended to each WAV file, ms, so its last utterance ends at a silence "
                 "endpoint as with an open microphone")
      ->capture_default_str();
  app.add_option("--reps", o.repetitions, "Streams per slot, one after another")
      ->capture_default_str();
  app.add_option("--duration-s", o.duration_s,
                 "Instead of --reps: slots keep opening streams for this long, s");
  app.add_option("--stagger-ms", o.stagger_ms, "Delay between the starts of the slots, ms")
      ->capture_default_str();
  app.add_option("--spread-ms", o.spread_ms,
                 "Instead of --stagger-ms: spread the slots' starts evenly over this long, ms");
  app.add_option("--connections", o.connections,
                 "Connections shared by the streams (0: one per slot)")
      ->capture_default_str();
  app.add_flag("--no-interim", a->no_interim, "Ask for final results only");
  app.add_flag("--no-words", a->no_words,
               "Do not ask for word offsets (latency is then per utterance end)");
  app.add_option("--model", o.stream.model, "Model name (default: the server's)");
  app.add_option("--language", o.stream.language, "Spoken language (default: the model's)");
  app.add_option("--silence-ms", o.stream.silence_ms,
                 "Endpoint silence, ms (0: the server's default)");
  app.add_option("--deadline-s", o.stream.deadline_s,
                 "Per-stream deadline, s (0: the audio's duration + 300 s)");
  app.add_option("--match-slack-ms", o.match_slack_ms,
                 "How far an interim word's end may be from the final word's to match, ms")
      ->capture_default_str();
  app.add_option("--reference-words", o.reference_words_path,
                 "Measure word latencies from these word times (`waav transcribe --json "
                 "--word-timestamps FILE...` output), not the server's own");
  app.add_option("--max-final-ms", o.criteria.max_final_ms,
                 "Keeps up: each final within this long after its utterance's end, ms")
      ->capture_default_str();
  app.add_option("--max-backlog-ms", o.criteria.max_backlog_ms,
                 "Keeps up: server backlog (sent - processed_audio_ms) within this, ms")
      ->capture_default_str();
  app.add_option("--max-send-delay-ms", o.criteria.max_send_delay_ms,
                 "Keeps up: every chunk written within this long after it was due, ms")
      ->capture_default_str();
  app.add_option("--max-partial-p99-ms", o.criteria.max_first_partial_p99_ms,
                 "Keeps up: first-partial p99 within this, ms (0: not checked)")
      ->capture_default_str();
  app.add_option("--json-out", a->json_out, "Write the full report as JSON to this file");
  app.add_flag("-v,--verbose", a->verbose, "Print the server's stage latencies for each step");
}

// Checks what CLI11 cannot; an empty string when all is well.
std::string Validate(Args& a) {
  waav::load::LoadOptions& o = a.options;
  if (absl::Status s = waav::cli::ValidateServerAddress(o.server); !s.ok()) {
    return std::string(s.message());
  }
  absl::StatusOr<waav::cli::EncodingChoice> encoding = waav::cli::ParseEncodingChoice(a.encoding);
  if (!encoding.ok()) return std::string(encoding.status().message());
  o.audio.encoding = *encoding;
  if (a.fast) o.stream.speed = 0;
  if (!a.fast && !(o.stream.speed > 0 && o.stream.speed <= 1000)) {
    return absl::StrCat("--speed ", o.stream.speed, " is outside (0, 1000]; --fast for no pacing");
  }
  if (a.streams < 1 || a.streams > 100000) {
    return absl::StrCat("--streams ", a.streams, " is outside 1..100000");
  }
  if (o.repetitions < 1) return absl::StrCat("--reps ", o.repetitions, " is below 1");
  if (!(o.duration_s >= 0) || !(o.stagger_ms >= 0) || !(o.spread_ms >= 0) || !(a.settle_s >= 0) ||
      !(o.stream.deadline_s >= 0)) {
    return "--duration-s, --stagger-ms, --spread-ms, --settle-s and --deadline-s cannot be "
           "negative";
  }
  if (o.connections < 0) return "--connections cannot be negative";
  if (o.stream.silence_ms != 0 && (o.stream.silence_ms < 100 || o.stream.silence_ms > 10000)) {
    return absl::StrCat("--silence-ms ", o.stream.silence_ms, " is outside 100..10000");
  }
  o.stream.interim_results = !a.no_interim;
  o.stream.word_time_offsets = !a.no_words;
  if (!o.reference_words_path.empty()) {
    if (a.no_words) return "--reference-words needs word offsets (drop --no-words)";
    absl::StatusOr<waav::load::ReferenceWords> reference =
        waav::load::LoadReferenceWords(o.reference_words_path);
    if (!reference.ok()) return std::string(reference.status().message());
    o.reference_words = std::move(*reference);
    for (const std::string& file : o.files) {
      if (!o.reference_words.contains(waav::load::FileNameOf(file))) {
        return absl::StrCat("--reference-words ", o.reference_words_path, " has no words for ",
                            waav::load::FileNameOf(file));
      }
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"waav-load: concurrent real-time streams against waavd; latency, RTF, errors"};
  Args args;
  AddOptions(app, &args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (const std::string error = Validate(args); !error.empty()) {
    std::cerr << "waav-load: " << error << std::endl;
    return 2;
  }
  std::vector<int> steps = {args.streams};
  if (!args.ramp.empty()) {
    absl::StatusOr<std::vector<int>> ramp = waav::load::ParseRamp(args.ramp);
    if (!ramp.ok()) {
      std::cerr << "waav-load: " << ramp.status().message() << std::endl;
      return 2;
    }
    steps = *ramp;
  }
  auto audio = waav::load::LoadFiles(args.options);
  if (!audio.ok()) {
    std::cerr << "waav-load: " << waav::cli::OneLine(std::string(audio.status().message()))
              << std::endl;
    return 2;
  }

  std::cout << waav::load::DescribeRun(args.options, *audio) << '\n'
            << waav::load::StepTableHeader() << std::flush;
  std::string stage_tables;
  constexpr size_t kLateWordRows = 8;
  const waav::load::RampReport ramp =
      waav::load::RunRamp(args.options, *audio, steps, args.keep_going || args.ramp.empty(),
                          args.settle_s, [&](const waav::load::StepReport& step) {
                            std::cout << waav::load::StepTableRow(step) << std::flush;
                            if (args.verbose) stage_tables += waav::load::StageTable(step);
                            stage_tables += waav::load::LateWordTable(step, kLateWordRows);
                          });
  std::cout << '\n' << waav::load::DescribeReference(args.options, ramp) << '\n';
  if (!stage_tables.empty()) std::cout << '\n' << stage_tables;
  for (const waav::load::StepReport& step : ramp.steps) {
    for (const auto& [name, sample] : step.error_sample) {
      std::cout << "N=" << step.concurrency << ": " << name
                << " example: " << waav::cli::OneLine(sample) << '\n';
    }
  }
  if (args.options.stream.speed > 0) std::cout << '\n' << waav::load::DescribeVerdict(ramp);

  if (!args.json_out.empty()) {
    std::ofstream out(args.json_out);
    out << waav::load::ReportJson(args.options, *audio, ramp).dump(2) << '\n';
    if (!out) {
      std::cerr << "waav-load: cannot write " << args.json_out << std::endl;
      return 2;
    }
  }
  // 1 when the server was of no use at all: every stream of the first step failed.
  const waav::load::StepReport& first = ramp.steps.front();
  return first.streams_ok == 0 ? 1 : 0;
}
