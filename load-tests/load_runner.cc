#include "load-tests/load_runner.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <queue>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tools/waav/grpc_client.h"

namespace waav::load {
namespace {

// Runs tasks at their times on one thread, in time order (ties in submission order).
class Pacer {
 public:
  Pacer() : thread_([this] { Loop(); }) {}
  ~Pacer() { Stop(); }
  Pacer(const Pacer&) = delete;
  Pacer& operator=(const Pacer&) = delete;

  // Thread-safe. Notifies under the lock, so that once Stop() has the lock no caller of At()
  // still touches the pacer.
  void At(Clock::time_point when, std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    queue_.push({when, seq_++, std::move(task)});
    wake_.notify_one();
  }

  // Drops the tasks not yet run and joins the thread. Not from a task.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Task {
    Clock::time_point when;
    uint64_t seq;
    mutable std::function<void()> run;
    bool operator>(const Task& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopped_) {
      if (queue_.empty()) {
        wake_.wait(lock);
        continue;
      }
      const Clock::time_point when = queue_.top().when;
      if (when > Clock::now()) {
        wake_.wait_until(lock, when);
        continue;
      }
      std::function<void()> run = std::move(queue_.top().run);
      queue_.pop();
      lock.unlock();
      run();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::priority_queue<Task, std::vector<Task>, std::greater<Task>> queue_;
  uint64_t seq_ = 0;
  bool stopped_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

class StepRun {
 public:
  StepRun(const LoadOptions& options,
          const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio, int concurrency)
      : options_(options), audio_(audio), concurrency_(concurrency), started_(concurrency, 0) {
    const int channels =
        options.connections > 0 ? std::min(options.connections, concurrency) : concurrency;
    for (int i = 0; i < channels; ++i) {
      stubs_.push_back(v1::Recognizer::NewStub(cli::MakeChannel(options.server, true)));
    }
  }

  std::vector<StreamRecord> Run(double* wall_s) {
    step_start_ = Clock::now();
    slots_running_ = concurrency_;
    const double stagger_ms =
        options_.spread_ms > 0 ? options_.spread_ms / concurrency_ : options_.stagger_ms;
    for (int slot = 0; slot < concurrency_; ++slot) {
      const auto delay =
          std::chrono::microseconds(static_cast<int64_t>(stagger_ms * 1000.0 * slot));
      pacer_.At(step_start_ + delay, [this, slot] { StartNext(slot); });
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [this] { return slots_running_ == 0 && active_ == 0; });
    }
    pacer_.Stop();
    *wall_s = std::chrono::duration<double>(Clock::now() - step_start_).count();
    std::vector<StreamRecord> records;
    records.reserve(streams_.size());
    for (const auto& s : streams_) records.push_back(s->record());
    return records;
  }

 private:
  // On the pacer thread: opens slot's next stream, or retires the slot.
  void StartNext(int slot) {
    LoadStream* stream = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      int& count = started_[static_cast<size_t>(slot)];
      const bool more = options_.duration_s > 0
                            ? std::chrono::duration<double>(Clock::now() - step_start_).count() <
                                  options_.duration_s
                            : count < options_.repetitions;
      if (!more) {
        if (--slots_running_ == 0 && active_ == 0) done_.notify_all();
        return;
      }
      const auto& audio = audio_[static_cast<size_t>(slot + count) % audio_.size()];
      ++count;
      ++active_;
      StreamSettings settings = options_.stream;
      if (settings.deadline_s <= 0) {
        // A stream that hangs ends DEADLINE_EXCEEDED instead of stalling the run.
        settings.deadline_s =
            audio->duration_us / 1e6 / std::max(1.0, settings.speed > 0 ? settings.speed : 1.0) +
            300;
      }
      streams_.push_back(std::make_unique<LoadStream>(
          audio, settings, absl::StrFormat("waav-load-n%d-s%d-r%d", concurrency_, slot, count),
          slot, step_start_, [this, slot](LoadStream*) { OnStreamDone(slot); }));
      stream = streams_.back().get();
    }
    Pace(stream, stream->Start(stubs_[static_cast<size_t>(slot) % stubs_.size()].get()));
  }

  void Pace(LoadStream* stream, std::optional<Clock::time_point> due) {
    if (due) pacer_.At(*due, [this, stream] { Pace(stream, stream->OnDue()); });
  }

  // On a gRPC thread, from the stream's OnDone. The slot's next stream is scheduled first and
  // the count dropped last: Run() cannot finish (and destroy this) before the lock is released.
  void OnStreamDone(int slot) {
    pacer_.At(Clock::now(), [this, slot] { StartNext(slot); });
    std::lock_guard<std::mutex> lock(mu_);
    if (--active_ == 0 && slots_running_ == 0) done_.notify_all();
  }

  const LoadOptions& options_;
  const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio_;
  const int concurrency_;
  std::vector<std::unique_ptr<v1::Recognizer::Stub>> stubs_;
  Clock::time_point step_start_;
  std::mutex mu_;
  std::condition_variable done_;
  std::vector<int> started_;                          // streams opened per slot (mu_)
  std::vector<std::unique_ptr<LoadStream>> streams_;  // all of them, in start order (mu_)
  int active_ = 0;                                    // streams not yet done (mu_)
  int slots_running_ = 0;                             // slots not yet retired (mu_)
  Pacer pacer_;  // declared last: stopped (and joined) before the streams are destroyed
};

void AddStage(std::map<std::string, std::vector<double>>* stages, const std::string& name,
              double value, bool skip_zero) {
  if (skip_zero && value == 0) return;
  (*stages)[name].push_back(value);
}

}  // namespace

StepReport Aggregate(int concurrency, const std::vector<StreamRecord>& records,
                     const LoadOptions& options, double wall_s) {
  StepReport report;
  report.concurrency = concurrency;
  report.streams = static_cast<int>(records.size());
  report.wall_s = wall_s;
  report.paced = options.stream.speed > 0;
  std::vector<double> first, stable, final, utterance_final, rtf, backlog, send_delay;
  std::map<std::string, std::vector<double>> stages;
  // Per reference word ((file, index)): its first-partial and final latencies, and how many of
  // them the final showed first.
  struct WordSamples {
    std::vector<double> first, final;
    size_t first_shown_by_final = 0;
  };
  std::map<std::pair<std::string, size_t>, WordSamples> by_reference_word;
  for (const StreamRecord& record : records) {
    report.audio_s += static_cast<double>(record.audio_us) / 1e6;
    if (record.code == grpc::StatusCode::OK) {
      ++report.streams_ok;
      rtf.push_back(StreamRtf(record));
    } else {
      const std::string name = StatusCodeName(record.code);
      if (report.errors[name]++ == 0) report.error_sample[name] = record.message;
    }
    backlog.push_back(record.max_backlog_ms);
    send_delay.push_back(record.max_send_delay_ms);
    const std::vector<ReferenceWord>* reference = nullptr;
    const std::string file_name = FileNameOf(record.file);
    if (const auto it = options.reference_words.find(file_name);
        it != options.reference_words.end()) {
      reference = &it->second;
    }
    const StreamLatencies latencies = AnalyzeStream(record, options.match_slack_ms, reference);
    report.finals += latencies.finals;
    report.words += latencies.words;
    report.reference_matched += latencies.reference_matched;
    report.reference_unmatched += latencies.reference_unmatched;
    if (latencies.finals > 0) {
      ++(latencies.reference == Reference::kWordEnds ? report.streams_word_reference
                                                     : report.streams_utterance_reference);
    }
    first.insert(first.end(), latencies.first_partial_ms.begin(), latencies.first_partial_ms.end());
    stable.insert(stable.end(), latencies.first_stable_ms.begin(), latencies.first_stable_ms.end());
    final.insert(final.end(), latencies.final_ms.begin(), latencies.final_ms.end());
    utterance_final.insert(utterance_final.end(), latencies.utterance_final_ms.begin(),
                           latencies.utterance_final_ms.end());
    for (size_t i = 0; i < latencies.reference_index.size(); ++i) {
      WordSamples& word = by_reference_word[{file_name, latencies.reference_index[i]}];
      word.first.push_back(latencies.first_partial_ms[i]);
      word.final.push_back(latencies.final_ms[i]);
      word.first_shown_by_final += latencies.first_shown_by_final[i] ? 1 : 0;
    }
    for (const ObservedResult& r : record.results) {
      const v1::ResultLatency& l = r.latency;
      AddStage(&stages, r.is_final ? "audio_to_result (final)" : "audio_to_result (interim)",
               l.audio_to_result_ms(), false);
      AddStage(&stages, "server", l.server_ms(), false);
      AddStage(&stages, "ingest_wait", l.ingest_wait_ms(), true);
      AddStage(&stages, "frontend", l.frontend_ms(), true);
      AddStage(&stages, "queue", l.queue_ms(), true);
      AddStage(&stages, "encoder", l.encoder_ms(), true);
      AddStage(&stages, "decoder", l.decoder_ms(), true);
      AddStage(&stages, "processing", l.processing_ms(), true);
      AddStage(&stages, "batch_size", l.batch_size(), true);
    }
  }
  report.first_partial_ms = Summarize(std::move(first));
  report.first_stable_ms = Summarize(std::move(stable));
  report.final_ms = Summarize(std::move(final));
  report.utterance_final_ms = Summarize(std::move(utterance_final));
  report.rtf = Summarize(std::move(rtf));
  report.backlog_ms = Summarize(std::move(backlog));
  report.send_delay_ms = Summarize(std::move(send_delay));
  for (auto& [name, values] : stages) report.server_stages[name] = Summarize(std::move(values));
  // Every reference word of the files streamed, measured or not (a word no stream matched is
  // worth seeing too).
  std::set<std::string> files_streamed;
  for (const StreamRecord& record : records) files_streamed.insert(FileNameOf(record.file));
  for (const std::string& file : files_streamed) {
    const auto words = options.reference_words.find(file);
    if (words == options.reference_words.end()) continue;
    for (size_t i = 0; i < words->second.size(); ++i) {
      ReferenceWordReport word;
      word.file = file;
      word.index = i;
      word.text = words->second[i].text;
      word.end_ms = words->second[i].end_ms;
      if (auto it = by_reference_word.find({file, i}); it != by_reference_word.end()) {
        word.measured = it->second.first.size();
        word.first_shown_by_final = it->second.first_shown_by_final;
        word.first_partial_ms = Summarize(std::move(it->second.first));
        word.final_ms = Summarize(std::move(it->second.final));
      }
      report.reference_words.push_back(std::move(word));
    }
  }

  // The verdict.
  const KeepUpCriteria& c = options.criteria;
  std::vector<std::string>& why = report.failures;
  if (!report.paced) why.push_back("not paced (--fast): no latency, no verdict");
  if (report.streams == 0) why.push_back("no streams ran");
  if (report.streams_ok < report.streams) {
    std::string codes;
    for (const auto& [name, n] : report.errors) {
      absl::StrAppend(&codes, codes.empty() ? "" : ", ", name, " x", n);
    }
    why.push_back(absl::StrCat(report.streams - report.streams_ok, " of ", report.streams,
                               " streams failed (", codes, ")"));
  }
  if (report.paced) {
    if (report.finals == 0) why.push_back("no final results to judge by");
    if (report.utterance_final_ms.count > 0 && report.utterance_final_ms.max > c.max_final_ms) {
      why.push_back(
          absl::StrFormat("a final result came %.0f ms after its utterance's end "
                          "(limit %.0f ms)",
                          report.utterance_final_ms.max, c.max_final_ms));
    }
    if (report.backlog_ms.max > c.max_backlog_ms) {
      why.push_back(absl::StrFormat("server backlog reached %.0f ms of audio (limit %.0f ms)",
                                    report.backlog_ms.max, c.max_backlog_ms));
    }
    if (report.send_delay_ms.max > c.max_send_delay_ms) {
      why.push_back(absl::StrFormat("a chunk was written %.0f ms after it was due (limit %.0f ms)",
                                    report.send_delay_ms.max, c.max_send_delay_ms));
    }
    if (c.max_first_partial_p99_ms > 0 && report.first_partial_ms.count > 0 &&
        report.first_partial_ms.p99 > c.max_first_partial_p99_ms) {
      why.push_back(absl::StrFormat("first-partial p99 %.0f ms (limit %.0f ms)",
                                    report.first_partial_ms.p99, c.max_first_partial_p99_ms));
    }
  }
  report.keeps_up = why.empty();
  return report;
}

absl::StatusOr<std::vector<std::shared_ptr<const cli::ClientAudio>>> LoadFiles(
    const LoadOptions& options) {
  if (options.files.empty()) return absl::InvalidArgumentError("no audio files given");
  std::vector<std::shared_ptr<const cli::ClientAudio>> out;
  for (const std::string& file : options.files) {
    absl::StatusOr<cli::ClientAudio> audio = cli::LoadClientAudio(file, options.audio);
    if (!audio.ok()) return audio.status();
    out.push_back(std::make_shared<const cli::ClientAudio>(std::move(*audio)));
  }
  return out;
}

std::vector<StreamRecord> RunStep(const LoadOptions& options,
                                  const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio,
                                  int concurrency, double* wall_s) {
  StepRun run(options, audio, concurrency);
  return run.Run(wall_s);
}

RampReport RunRamp(const LoadOptions& options,
                   const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio,
                   const std::vector<int>& concurrencies, bool keep_going, double settle_s,
                   const std::function<void(const StepReport&)>& on_step) {
  RampReport ramp;
  for (size_t i = 0; i < concurrencies.size(); ++i) {
    if (i > 0 && settle_s > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(settle_s * 1000)));
    }
    double wall_s = 0;
    const std::vector<StreamRecord> records = RunStep(options, audio, concurrencies[i], &wall_s);
    ramp.steps.push_back(Aggregate(concurrencies[i], records, options, wall_s));
    const StepReport& step = ramp.steps.back();
    if (on_step) on_step(step);
    if (step.keeps_up) {
      ramp.largest_keeping_up = std::max(ramp.largest_keeping_up, step.concurrency);
    } else if (!keep_going) {
      break;
    }
  }
  return ramp;
}

absl::StatusOr<std::vector<int>> ParseRamp(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    piece = absl::StripAsciiWhitespace(piece);
    int n = 0;
    if (!absl::SimpleAtoi(piece, &n) || n < 1 || n > 100000) {
      return absl::InvalidArgumentError(absl::StrCat("ramp \"", text, "\": \"", std::string(piece),
                                                     "\" is not a stream count 1..100000"));
    }
    if (!out.empty() && n <= out.back()) {
      return absl::InvalidArgumentError(absl::StrCat("ramp \"", text, "\": counts must increase (",
                                                     n, " after ", out.back(), ")"));
    }
    out.push_back(n);
  }
  if (out.size() > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("ramp \"", text, "\" has ", out.size(), " steps; at most 20"));
  }
  return out;
}

}  // namespace waav::load
