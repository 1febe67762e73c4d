#include "engine/streaming/streaming_engine.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "engine/metrics/batch_metrics.h"
#include "engine/metrics/stage_metrics.h"
#include "engine/models/whisper/decoder_pool.h"
#include "engine/runtime/status.h"
#include "engine/runtime/thread_pool.h"
#include "engine/streaming/endpointer.h"
#include "engine/streaming/ingest_ring.h"
#include "engine/streaming/result_sender.h"
#include "engine/streaming/spoken_words.h"
#include "engine/streaming/stream_state.h"
#include "engine/streaming/utterance_decoder.h"
#include "spdlog/spdlog.h"

namespace waav::streaming {
namespace {

constexpr int kSampleRateHz = 16000;
constexpr int kMsPerEncoderPosition = 20;  // Whisper: 10 ms mel frames, a stride-2 convolution
// A decode whose tokens end in this many copies of one n-gram is looping (seen: a final whose
// forced prefix held the whole utterance went on with ". . . ." for 225 steps, 1.1 s of CPU):
// it stops there, keeping one copy.
constexpr int kMaxRepeats = 4;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int64_t SamplesToMs(int64_t samples) { return samples * 1000 / kSampleRateHz; }
double NsToMs(int64_t ns) { return static_cast<double>(ns) / 1e6; }
double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Threads of the scheduler's window preparation (EngineOptions::prepare_threads).
int PrepareThreads(const EngineOptions& options) {
  if (options.prepare_threads > 0) return options.prepare_threads;
  const int hardware = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::min({options.max_batch, hardware, 8});
}

}  // namespace

class StreamingEngine::Impl {
 public:
  Impl(const EngineOptions& options, const whisper::Transcriber& transcriber,
       VoiceActivityModel& vad, std::unique_ptr<whisper::DecoderStatePool> decoders,
       std::vector<std::unique_ptr<whisper::EncoderBuffers>> encoders,
       std::array<HostBuffer, 2> mel_staging)
      : options_(options),
        transcriber_(transcriber),
        vad_(vad),
        decoders_(std::move(decoders)),
        prepare_pool_(PrepareThreads(options)),
        encoders_(std::move(encoders)),
        short_window_positions_(transcriber.model().takes_short_windows()
                                    ? options.partial_window_ms / kMsPerEncoderPosition
                                    : 0),
        mel_staging_(std::move(mel_staging)),
        ring_(static_cast<size_t>(options.ingest_ring_slots)) {
    frontend_ = std::thread([this] { FrontendLoop(); });
    scheduler_ = std::thread([this] { SchedulerLoop(); });
  }

  ~Impl() {
    stop_.store(true);
    ring_.Close();
    {
      std::lock_guard lock(ready_mu_);
      ready_cv_.notify_all();
    }
    frontend_.join();
    scheduler_.join();
    std::lock_guard lock(streams_mu_);
    for (auto& [id, stream] : streams_) {
      if (!stream->done)
        stream->sink->OnDone(absl::CancelledError("the engine shut down"),
                             SamplesToMs(stream->received_samples.load()));
    }
  }

  absl::StatusOr<uint64_t> Open(const StreamOptions& options, std::shared_ptr<StreamSink> sink) {
    RETURN_IF_ERROR(options.Validate());
    if (!accepting_.load()) {
      return absl::UnavailableError("the server is shutting down and accepts no new streams");
    }
    auto stream = std::make_shared<Stream>(options, std::move(sink), vad_.NewState(),
                                           transcriber_.vocabulary());
    std::lock_guard lock(streams_mu_);
    if (static_cast<int>(streams_.size()) >= options_.max_streams) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the server is at its limit of ", options_.max_streams, " concurrent streams"));
    }
    stream->id = next_id_++;
    streams_[stream->id] = stream;
    return stream->id;
  }

  absl::Status Push(uint64_t id, absl::Span<const float> samples) {
    ASSIGN_OR_RETURN(std::shared_ptr<Stream> stream, Find(id));
    if (stream->finishing.load()) {
      return absl::FailedPreconditionError("audio after the end of the stream");
    }
    if (!ring_.Push(id, samples, NowNs())) {
      return absl::ResourceExhaustedError("the engine's ingest queue is full; slow down");
    }
    stream->received_samples.fetch_add(static_cast<int64_t>(samples.size()));
    return absl::OkStatus();
  }

  absl::Status Finish(uint64_t id) {
    ASSIGN_OR_RETURN(std::shared_ptr<Stream> stream, Find(id));
    if (stream->finishing.exchange(true)) return absl::OkStatus();
    if (!ring_.PushEndOfStream(id, NowNs())) {
      stream->finishing.store(false);
      return absl::ResourceExhaustedError("the engine's ingest queue is full; slow down");
    }
    return absl::OkStatus();
  }

  void Cancel(uint64_t id) {
    auto stream = Find(id);
    if (!stream.ok()) return;
    (*stream)->cancelled.store(true);
    Enqueue(*stream, Job{.kind = Job::kCancelled});
  }

  void StopAccepting() { accepting_.store(false); }
  int Active() const {
    std::lock_guard lock(streams_mu_);
    return static_cast<int>(streams_.size());
  }
  size_t IngestDepth() const { return ring_.depth(); }
  size_t IngestCapacity() const { return ring_.capacity(); }
  size_t SchedulerDepth() const { return ready_depth_.load(std::memory_order_relaxed); }

 private:
  using Job = internal::Job;
  using Stream = internal::Stream;

  absl::StatusOr<std::shared_ptr<Stream>> Find(uint64_t id) const {
    std::lock_guard lock(streams_mu_);
    auto it = streams_.find(id);
    if (it == streams_.end() || it->second->cancelled.load()) {
      return absl::NotFoundError(absl::StrCat("no open stream ", id));
    }
    return it->second;
  }

  void Enqueue(const std::shared_ptr<Stream>& stream, Job job) {
    job.queued_ns = NowNs();
    bool schedule = false;
    {
      std::lock_guard lock(stream->jobs_mu);
      stream->jobs.push_back(std::move(job));
      if (!stream->in_ready_queue) {
        stream->in_ready_queue = true;
        schedule = true;
      }
    }
    if (schedule) {
      std::lock_guard lock(ready_mu_);
      ready_.push_back(stream);
      ready_depth_.store(ready_.size(), std::memory_order_relaxed);
      ready_cv_.notify_one();
    }
  }

  // ---- Frontend worker ----------------------------------------------------------------------

  void FrontendLoop() {
    std::vector<IngestChunk> chunks;
    std::unordered_map<uint64_t, std::shared_ptr<Stream>> touched;
    while (!stop_.load()) {
      ring_.WaitForWork(20'000'000);
      chunks.clear();
      ring_.Drain(&chunks, 4096);
      if (chunks.empty()) continue;
      const int64_t now = NowNs();
      touched.clear();
      {
        std::lock_guard lock(streams_mu_);
        for (const IngestChunk& c : chunks) {
          auto it = streams_.find(c.stream_id);
          if (it != streams_.end()) touched.emplace(c.stream_id, it->second);
        }
      }
      double max_wait_ms = 0;
      for (const IngestChunk& c : chunks) {
        auto it = touched.find(c.stream_id);
        if (it == touched.end()) continue;
        Stream& s = *it->second;
        if (s.cancelled.load() || s.frontend_done) continue;
        if (c.end_of_stream) {
          s.end_of_stream = true;
        } else {
          s.pending.insert(s.pending.end(), c.samples, c.samples + c.num_samples);
        }
        s.newest_ns = c.enqueue_ns;
        s.ingest_wait_ms = NsToMs(now - c.enqueue_ns);
        max_wait_ms = std::max(max_wait_ms, s.ingest_wait_ms);
      }
      RunVad(touched);
      // Per round: ingest_wait is how long its oldest chunk waited in the ring; preprocessing
      // runs from that chunk's publication to the end of the round's VAD (features and speech
      // probabilities ready), so it is ingest_wait plus the round's frontend work. One clock
      // read per round, none per chunk.
      if (options_.stage_metrics != nullptr) {
        const double round_ms = NsToMs(NowNs() - now);
        options_.stage_metrics->Observe(metrics::Stage::kIngestWait, max_wait_ms / 1e3);
        options_.stage_metrics->Observe(metrics::Stage::kPreprocessing,
                                        (max_wait_ms + round_ms) / 1e3);
      }
      for (auto& [id, stream] : touched) {
        if (stream->end_of_stream && !stream->frontend_done && !stream->cancelled.load()) {
          EndOfStream(stream);
        }
      }
    }
  }

  // Runs the VAD over every full frame of every touched stream, one batch per round.
  void RunVad(const std::unordered_map<uint64_t, std::shared_ptr<Stream>>& touched) {
    const int frame = vad_.frame_samples();
    std::vector<std::shared_ptr<Stream>> batch;
    std::vector<float> frames;
    std::vector<VadStreamState*> states;
    std::vector<float> probabilities;
    for (;;) {
      batch.clear();
      for (const auto& [id, stream] : touched) {
        if (!stream->frontend_done && !stream->cancelled.load() &&
            static_cast<int>(stream->pending.size()) >= frame) {
          batch.push_back(stream);
        }
      }
      if (batch.empty()) return;
      const auto start = std::chrono::steady_clock::now();
      frames.resize(batch.size() * static_cast<size_t>(frame));
      states.clear();
      for (size_t i = 0; i < batch.size(); ++i) {
        std::copy(batch[i]->pending.begin(), batch[i]->pending.begin() + frame,
                  frames.begin() + static_cast<std::ptrdiff_t>(i * frame));
        states.push_back(batch[i]->vad_state.get());
      }
      probabilities.assign(batch.size(), 0.0f);
      const absl::Status status = vad_.Process(frames, states, absl::MakeSpan(probabilities));
      const double vad_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (options_.stage_metrics != nullptr) {
        options_.stage_metrics->Observe(metrics::Stage::kFrontend, vad_ms / 1e3);
      }
      if (options_.batch_metrics != nullptr) {
        options_.batch_metrics->Observe(metrics::BatchModel::kVad, static_cast<int>(batch.size()));
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        Stream& s = *batch[i];
        if (!status.ok()) {
          Fail(batch[i], status);
          continue;
        }
        const int64_t frame_start = s.vad_samples;
        const bool word_gap =
            s.options.gap_partial_db > 0 &&
            s.word_gaps.Push(absl::MakeConstSpan(s.pending.data(), static_cast<size_t>(frame)));
        s.retained.insert(s.retained.end(), s.pending.begin(), s.pending.begin() + frame);
        s.pending.erase(s.pending.begin(), s.pending.begin() + frame);
        s.vad_samples += frame;
        const Endpointer::Update update = s.endpointer.Push(probabilities[i], frame_start, frame);
        HandleUpdate(batch[i], update, word_gap, vad_ms);
        TrimRetained(s);
      }
    }
  }

  void HandleUpdate(const std::shared_ptr<Stream>& stream, const Endpointer::Update& update,
                    bool word_gap, double frontend_ms) {
    Stream& s = *stream;
    if (update.ended) {
      s.partial_triggers.UtteranceEnded();
      EmitFinal(stream, *update.ended, frontend_ms);
      if (s.frontend_done) return;
    }
    if (update.started) {
      s.partial_triggers.UtteranceStarted(s.vad_samples);
      Enqueue(stream, Job{.kind = Job::kSpeechStarted,
                          .utterance_index = s.utterance_index,
                          .offset_ms = SamplesToMs(update.started->start_sample),
                          .detected_ms = SamplesToMs(update.started->detected_sample)});
    }
    const HeardSpeech heard{.samples = s.vad_samples,
                            .in_speech = s.endpointer.in_speech(),
                            .silence_since = s.endpointer.silence_since(),
                            .padded_speech_end = s.endpointer.padded_speech_end(),
                            .word_gap = word_gap};
    const DecodeLoad load{.scheduler_behind = scheduler_behind_.load(std::memory_order_relaxed),
                          .stream_decoding = s.decoding.load(std::memory_order_relaxed)};
    if (const std::optional<int64_t> end = s.partial_triggers.Judge(heard, load)) {
      Enqueue(stream, UtteranceJob(s, Job::kPartial, *end, frontend_ms));
    }
  }

  Job UtteranceJob(const Stream& s, Job::Kind kind, int64_t end_sample, double frontend_ms) {
    Job job{.kind = kind, .utterance_index = s.utterance_index};
    const int64_t begin = std::max(s.endpointer.utterance_start(), s.retained_begin);
    const int64_t end = std::clamp<int64_t>(end_sample, begin, s.vad_samples);
    job.audio.assign(s.retained.begin() + (begin - s.retained_begin),
                     s.retained.begin() + (end - s.retained_begin));
    job.start_ms = SamplesToMs(begin);
    job.newest_audio_ns = s.newest_ns;
    job.ingest_wait_ms = s.ingest_wait_ms;
    job.frontend_ms = frontend_ms;
    return job;
  }

  void EmitFinal(const std::shared_ptr<Stream>& stream, const UtteranceEnd& end,
                 double frontend_ms) {
    Stream& s = *stream;
    Job final_job = UtteranceJob(s, Job::kFinal, end.end_sample, frontend_ms);
    final_job.reason = end.reason;
    Enqueue(stream, std::move(final_job));
    Enqueue(stream, Job{.kind = Job::kSpeechEnded,
                        .utterance_index = s.utterance_index,
                        .offset_ms = SamplesToMs(end.end_sample),
                        .detected_ms = SamplesToMs(end.detected_sample)});
    ++s.utterance_index;
    if (s.options.single_utterance) {
      s.frontend_done = true;
      Enqueue(stream, Job{.kind = Job::kDone});
    }
  }

  void EndOfStream(const std::shared_ptr<Stream>& stream) {
    Stream& s = *stream;
    // The last partial frame is too short for the VAD; it still belongs to an open utterance.
    s.retained.insert(s.retained.end(), s.pending.begin(), s.pending.end());
    s.vad_samples += static_cast<int64_t>(s.pending.size());
    s.pending.clear();
    if (auto end = s.endpointer.Finish(s.vad_samples)) EmitFinal(stream, *end, 0.0);
    if (!s.frontend_done) {
      s.frontend_done = true;
      Enqueue(stream, Job{.kind = Job::kDone});
    }
  }

  // Keeps what a coming utterance may still need: from the open utterance's start, or enough
  // history for a start to be confirmed late and padded.
  void TrimRetained(Stream& s) {
    int64_t keep_from;
    if (s.endpointer.in_speech()) {
      keep_from = s.endpointer.utterance_start();
    } else {
      const EndpointConfig& e = s.options.endpoint;
      const int pad_ms = std::max(e.speech_pad_ms, e.cold_start_pad_ms);
      keep_from = s.vad_samples -
                  static_cast<int64_t>(e.min_speech_ms + pad_ms + 100) * kSampleRateHz / 1000;
    }
    keep_from = std::clamp(keep_from, s.retained_begin, s.vad_samples);
    // Erase in large steps only: the copy is linear in what remains.
    if (keep_from - s.retained_begin >= kSampleRateHz) {
      s.retained.erase(s.retained.begin(), s.retained.begin() + (keep_from - s.retained_begin));
      s.retained_begin = keep_from;
    }
  }

  void Fail(const std::shared_ptr<Stream>& stream, const absl::Status& status) {
    stream->frontend_done = true;
    Job job{.kind = Job::kDone};
    stream->error = status;
    Enqueue(stream, std::move(job));
  }

  // ---- Scheduler ----------------------------------------------------------------------------
  //
  // Each round takes up to max_batch streams from the ready queue (round-robin), runs each
  // one's queued events up to its next decode job, decodes those jobs' windows as one batch,
  // then runs the events that follow each decode. What is left of a stream's queue (its next
  // decode and everything after it) goes back to the front of its queue and the stream to the
  // back of the ready queue, so a stream contributes one window per batch and its sink still
  // sees everything in order.

  // A decode job taken for this round's batch, with the jobs queued behind it.
  struct Row {
    std::shared_ptr<Stream> stream;
    Job job;
    std::deque<Job> rest = {};
    double queue_ms = 0;
    UtteranceInput input = {};
    absl::Status prepared = absl::OkStatus();  // Prepare's (an error fails the row's stream)
    double encoder_ms = 0;
    int encoder_positions = 0;                       // of the window it was encoded in
    std::optional<RestartWatch> restart_watch = {};  // partials (EngineOptions::restart_stop_words)
  };

  void SchedulerLoop() {
    frontend::LogMel log_mel;
    std::vector<std::shared_ptr<Stream>> taken;
    std::vector<Row> rows;
    const size_t max_batch = static_cast<size_t>(options_.max_batch);
    for (;;) {
      taken.clear();
      {
        std::unique_lock lock(ready_mu_);
        ready_cv_.wait(lock, [&] { return stop_.load() || !ready_.empty(); });
        if (stop_.load()) return;
        while (!ready_.empty() && taken.size() < max_batch) {
          taken.push_back(std::move(ready_.front()));
          ready_.pop_front();
        }
        ready_depth_.store(ready_.size(), std::memory_order_relaxed);
        scheduler_behind_.store(!ready_.empty(), std::memory_order_relaxed);
      }
      rows.clear();
      for (std::shared_ptr<Stream>& stream : taken) {
        std::deque<Job> jobs;
        {
          std::lock_guard lock(stream->jobs_mu);
          jobs.swap(stream->jobs);
          stream->in_ready_queue = false;
        }
        if (std::optional<Job> job = RunUntilDecode(stream, jobs)) {
          rows.push_back(Row{.stream = stream, .job = std::move(*job), .rest = std::move(jobs)});
        }
      }
      if (rows.empty()) continue;
      // Finals first: an utterance's final is what its client waits for (and what keeping up
      // is judged on), partials are best effort. A round that has finals leaves its partials
      // for the next round, so a final never waits behind other streams' partial encodes.
      const bool has_final = std::any_of(rows.begin(), rows.end(),
                                         [](const Row& r) { return r.job.kind == Job::kFinal; });
      if (has_final) {
        std::erase_if(rows, [this](Row& row) {
          if (row.job.kind != Job::kPartial) return false;
          row.rest.push_front(std::move(row.job));
          Requeue(row.stream, std::move(row.rest));
          return true;
        });
      }
      for (Row& row : rows) row.stream->decoding.store(true, std::memory_order_relaxed);
      DecodeBatch(rows, log_mel);
      for (Row& row : rows) {
        row.stream->decoding.store(false, std::memory_order_relaxed);
        if (std::optional<Job> next = RunUntilDecode(row.stream, row.rest)) {
          row.rest.push_front(std::move(*next));
          Requeue(row.stream, std::move(row.rest));
        }
      }
    }
  }

  // Runs `jobs` from the front until a decode job, which it removes and returns (std::nullopt
  // when the queue ran out or the stream is closed). Of consecutive partials only the newest is
  // decoded, and none just before a final: a backlog would only add latency.
  std::optional<Job> RunUntilDecode(const std::shared_ptr<Stream>& stream, std::deque<Job>& jobs) {
    while (!jobs.empty() && !stream->done) {
      Job job = std::move(jobs.front());
      jobs.pop_front();
      // A partial followed by another partial, or by its utterance's final, would only be
      // overtaken at once.
      if (job.kind == Job::kPartial && !jobs.empty() &&
          (jobs.front().kind == Job::kPartial || jobs.front().kind == Job::kFinal)) {
        continue;
      }
      if (stream->cancelled.load() && job.kind != Job::kCancelled) continue;
      if (job.kind == Job::kPartial || job.kind == Job::kFinal) return job;
      RunEvent(stream, job);
    }
    jobs.clear();
    return std::nullopt;
  }

  // Puts jobs taken from a stream back at the front of its queue, before any queued since.
  void Requeue(const std::shared_ptr<Stream>& stream, std::deque<Job> jobs) {
    bool schedule = false;
    {
      std::lock_guard lock(stream->jobs_mu);
      stream->jobs.insert(stream->jobs.begin(), std::make_move_iterator(jobs.begin()),
                          std::make_move_iterator(jobs.end()));
      if (!stream->in_ready_queue) {
        stream->in_ready_queue = true;
        schedule = true;
      }
    }
    if (schedule) {
      std::lock_guard lock(ready_mu_);
      ready_.push_back(stream);
      ready_cv_.notify_one();
    }
  }

  void RunEvent(const std::shared_ptr<Stream>& stream, const Job& job) {
    StreamSink& sink = *stream->sink;
    switch (job.kind) {
      case Job::kSpeechStarted:
        sink.OnSpeechStarted(job.utterance_index, job.offset_ms, job.detected_ms);
        return;
      case Job::kSpeechEnded:
        sink.OnSpeechEnded(job.utterance_index, job.offset_ms, job.detected_ms);
        return;
      case Job::kDone:
        Close(stream, stream->error);
        return;
      case Job::kCancelled:
        Close(stream, absl::CancelledError("the stream was cancelled"));
        return;
      case Job::kPartial:
      case Job::kFinal:
        return;  // decoded in a batch
    }
  }

  void FailRow(Row& row, const absl::Status& status) {
    spdlog::error("stream {}: decoding failed: {}", row.stream->id, status.ToString());
    Close(row.stream, absl::InternalError(absl::StrCat("decoding failed: ", status.message())));
  }

  // Encodes row i's window into decoder slot i, in passes of descending powers of two of at
  // most encoder_[0]'s batch rows (one row per pass where the model does not batch its encoder):
  // each pass writes its windows into the first rows of the encoder buffers and replays the
  // pass and the cross-attention K/V projection into slots [begin, begin + size). The windows go
  // through mel_staging_ (pinned on a GPU: uploads without the driver's staging, each window's
  // audio frames only, its padding zeroed on the device), staged in parallel, pass k + 1's while
  // pass k runs on the device. Every row of a pass gets the pass's time, from its staging to its
  // end, in its encoder_ms. `timings`: where the scheduler's thread spent the passes (the debug
  // line's).
  struct EncodeTimings {
    int passes = 0;
    double first_staging_ms = 0, staging_ms = 0, upload_ms = 0, replay_ms = 0, wait_ms = 0;
  };
  absl::Status EncodeRows(std::vector<Row>& rows, EncodeTimings& timings) {
    const whisper::WhisperModel& model = transcriber_.model();
    struct Pass {
      int begin = 0, size = 0;
      std::chrono::steady_clock::time_point start;
    };
    std::vector<Pass> passes;
    const int n = static_cast<int>(rows.size());
    const int largest = encoders_.back()->batch_size();
    for (int begin = 0; begin < n;) {
      int size = largest;
      while (size > n - begin) size /= 2;
      passes.push_back({begin, size, {}});
      begin += size;
    }
    auto stage = [&](size_t k) -> absl::Status {
      Pass& pass = passes[k];
      pass.start = std::chrono::steady_clock::now();
      HostBuffer& staging = mel_staging_[k % 2];
      std::vector<absl::Status> staged(static_cast<size_t>(pass.size));
      prepare_pool_.ParallelFor(pass.size, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          staged[static_cast<size_t>(i)] = model.StageMel(
              rows[static_cast<size_t>(pass.begin + i)].input.mel, static_cast<int>(i), staging,
              whisper::WhisperModel::MelLayout::kTimeMajor);
        }
      });
      for (const absl::Status& status : staged) RETURN_IF_ERROR(status);
      return absl::OkStatus();
    };
    timings.passes = static_cast<int>(passes.size());
    auto clock = std::chrono::steady_clock::now();
    auto lap = [&clock] {  // ms since the last lap
      const auto now = std::chrono::steady_clock::now();
      const double ms = std::chrono::duration<double, std::milli>(now - clock).count();
      clock = now;
      return ms;
    };
    RETURN_IF_ERROR(stage(0));
    timings.first_staging_ms = lap();
    for (size_t k = 0; k < passes.size(); ++k) {
      const Pass& pass = passes[k];
      int positions = 0;  // the pass's window: its longest row's
      for (int i = 0; i < pass.size; ++i) {
        positions = std::max(positions, WindowPositions(rows[static_cast<size_t>(pass.begin + i)]));
      }
      ASSIGN_OR_RETURN(whisper::EncoderBuffers* const encoder, EncoderFor(pass.size, positions));
      whisper::EncoderBuffers& buffers = *encoder;
      std::vector<int> frames(static_cast<size_t>(pass.size));  // each window's audio
      for (int i = 0; i < pass.size; ++i) {
        frames[static_cast<size_t>(i)] = static_cast<int>(
            rows[static_cast<size_t>(pass.begin + i)].input.mel.size() / model.dims().n_mels);
      }
      absl::Status status = model.UploadStagedMel(mel_staging_[k % 2], frames, buffers);
      timings.upload_ms += lap();
      absl::StatusOr<whisper::DecoderState*> slots = decoders_->Range(pass.begin, pass.size);
      if (status.ok()) status = slots.status();
      if (status.ok()) status = model.RunEncoder(buffers, *slots);
      timings.replay_ms += lap();
      // The other staging buffer's last upload (pass k − 1's) ended at the last Synchronize.
      if (status.ok() && k + 1 < passes.size()) status = stage(k + 1);
      timings.staging_ms += lap();
      // Also on an error: no upload may still be reading a staging buffer after this returns.
      const absl::Status synced = model.backend().Synchronize();
      timings.wait_ms += lap();
      RETURN_IF_ERROR(status);
      RETURN_IF_ERROR(synced);
      const double ms = MsSince(pass.start);
      for (int i = 0; i < pass.size; ++i) {
        rows[static_cast<size_t>(pass.begin + i)].encoder_ms += ms;
        rows[static_cast<size_t>(pass.begin + i)].encoder_positions = positions;
      }
      if (metrics::BatchMetrics* b = options_.batch_metrics) {
        b->Observe(metrics::BatchModel::kWhisperEncoder, pass.size);
      }
    }
    return absl::OkStatus();
  }

  // Encoder positions a row's window needs: the model's, or for a partial where short windows
  // are on (EngineOptions::partial_window_ms) its audio and 2 s of silence, rounded up.
  int WindowPositions(const Row& row) const {
    const whisper::WhisperDims& dims = transcriber_.model().dims();
    if (short_window_positions_ == 0 || row.job.kind != Job::kPartial) return dims.n_audio_ctx;
    constexpr int kSilencePositions = 2000 / kMsPerEncoderPosition;
    const int frames = static_cast<int>(row.input.mel.size()) / dims.n_mels;
    const int needed = (frames + 1) / 2 + kSilencePositions;
    const int step = short_window_positions_;
    return std::min(dims.n_audio_ctx, (needed + step - 1) / step * step);
  }

  // Encoder buffers of `size` windows of `positions`: views of one set for whole windows, a set
  // of each shape made on first use for short ones (scheduler thread only).
  absl::StatusOr<whisper::EncoderBuffers*> EncoderFor(int size, int positions) {
    const whisper::WhisperModel& model = transcriber_.model();
    if (positions == model.dims().n_audio_ctx) {
      return encoders_[static_cast<size_t>(std::countr_zero(static_cast<unsigned>(size)))].get();
    }
    std::unique_ptr<whisper::EncoderBuffers>& kept = short_encoders_[{size, positions}];
    if (kept == nullptr) {
      ASSIGN_OR_RETURN(kept, model.NewEncoderBuffers(size, positions));
    }
    return kept.get();
  }

  // Encodes every row's window into its own decoder slot, decodes all windows in lockstep and
  // sends each stream its result.
  void DecodeBatch(std::vector<Row>& rows, const frontend::LogMel& log_mel) {
    const whisper::WhisperModel& model = transcriber_.model();
    const whisper::Vocabulary& vocabulary = transcriber_.vocabulary();
    whisper::GreedyOptions greedy;
    greedy.max_repeats = kMaxRepeats;
    const int64_t picked_ns = NowNs();
    const auto prepare_start = std::chrono::steady_clock::now();
    // Each row is another stream's decoder, and the front end is immutable: rows are prepared
    // in parallel.
    prepare_pool_.ParallelFor(static_cast<int64_t>(rows.size()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        Row& row = rows[static_cast<size_t>(i)];
        row.queue_ms = NsToMs(picked_ns - row.job.queued_ns);
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<UtteranceInput> input = row.stream->decoder.Prepare(
            log_mel, model.dims().n_frames(), row.job.audio, row.job.start_ms);
        if (input.ok()) {
          row.input = std::move(*input);
          if (row.job.kind == Job::kPartial && options_.restart_stop_words > 0) {
            const std::vector<int>& prompt = row.input.prompt;
            row.restart_watch.emplace(vocabulary,
                                      absl::MakeConstSpan(prompt).last(
                                          std::min(row.input.committed_tokens, prompt.size())),
                                      options_.restart_stop_words);
          }
        } else {
          row.prepared = input.status();
        }
        row.encoder_ms = MsSince(start);  // log-mel now; the encoder below adds to it
      }
    });
    const double prepare_ms = MsSince(prepare_start);
    // A window or prompt that cannot be decoded fails its own stream, not the batch.
    std::erase_if(rows, [&](Row& row) {
      const absl::Status status =
          row.prepared.ok()
              ? whisper::CheckPrompt(vocabulary, row.input.prompt, greedy, model.dims().n_text_ctx)
              : row.prepared;
      if (!status.ok()) FailRow(row, status);
      return !status.ok();
    });
    if (rows.empty()) return;
    // Longest audio first: the longest decodes are likely there, and rows that finish early at
    // the end let the batch shrink to a smaller bucket (DecodeGreedyBatch).
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return a.job.audio.size() > b.job.audio.size();
    });

    const auto encode_start = std::chrono::steady_clock::now();
    EncodeTimings encode;
    absl::Status status = EncodeRows(rows, encode);
    const double encode_ms = MsSince(encode_start);
    std::vector<std::vector<int>> prompts;
    for (Row& row : rows) prompts.push_back(std::move(row.input.prompt));
    if (options_.restart_stop_words > 0) {
      greedy.stop_before = [&rows](int b, int token) {
        std::optional<RestartWatch>& watch = rows[static_cast<size_t>(b)].restart_watch;
        return watch.has_value() && watch->StopsBefore(token);
      };
    }
    const int batch = static_cast<int>(rows.size());
    metrics::StageMetrics* m = options_.stage_metrics;
    std::vector<bool> delivered(rows.size(), false);
    const auto decode_start = std::chrono::steady_clock::now();
    // Each row's result is sent as soon as that row is done, not when the batch is, except
    // finals whose word times are wanted: they wait for the batch's last step and are aligned
    // together (one decoder pass for all, over their rows' windows, still in the slots:
    // WordAligner::AlignBatch), instead of one pass each as they finish.
    const whisper::WordAligner* aligner = transcriber_.word_aligner();
    struct Deferred {
      int row;
      whisper::GreedyResult decoded;
    };
    std::vector<Deferred> deferred;
    // Parts of the decoder's time on this thread, for the debug line (sending: posting the
    // results, the finals sent here, waiting for the sender), and the sender's own time.
    double send_ms = 0, align_ms = 0, sender_ms = 0;
    whisper::WordAligner::AlignTimings align_timings;
    // Settles row i's result in its stream's decoder and sends it; `spent` gets the time.
    auto send = [&](int i, const whisper::GreedyResult& decoded,
                    const UtteranceDecoder::AlignWordsFn& align_words, double& spent) {
      const auto send_start = std::chrono::steady_clock::now();
      struct AddElapsed {
        double& ms;
        std::chrono::steady_clock::time_point start;
        ~AddElapsed() { ms += MsSince(start); }
      } add_elapsed{spent, send_start};
      Row& row = rows[static_cast<size_t>(i)];
      Stream& s = *row.stream;
      if (s.done) return;
      RecognitionResult result =
          s.decoder.Finish(decoded, row.job.start_ms, row.job.audio.size(),
                           row.job.kind == Job::kFinal, row.job.reason, align_words);
      ResultLatency& latency = result.latency;
      latency.ingest_wait_ms = row.job.ingest_wait_ms;
      latency.frontend_ms = row.job.frontend_ms;
      latency.queue_ms = row.queue_ms;
      latency.encoder_ms = row.encoder_ms;
      latency.decoder_ms = MsSince(decode_start);  // the batch's steps until this row was sent
      latency.batch_size = batch;
      latency.encoder_positions = row.encoder_positions;
      latency.audio_to_result_ms = NsToMs(NowNs() - row.job.newest_audio_ns);
      if (m != nullptr) {
        m->Observe(metrics::Stage::kQueue, row.queue_ms / 1e3);
        m->Observe(metrics::Stage::kEncoder, latency.encoder_ms / 1e3);
        m->Observe(metrics::Stage::kStt, (latency.encoder_ms + latency.decoder_ms) / 1e3);
        m->ObserveEndToEnd(latency.audio_to_result_ms / 1e3);
      }
      // Silence and noise produce no transcript.
      if (result.transcript.empty()) return;
      s.sink->OnResult(result);
    };
    auto deliver = [&](int i, const whisper::GreedyResult& decoded) {
      Row& row = rows[static_cast<size_t>(i)];
      delivered[static_cast<size_t>(i)] = true;
      Stream& s = *row.stream;
      if (s.done) return;
      if (aligner != nullptr && row.job.kind == Job::kFinal && s.decoder.wants_word_times()) {
        deferred.push_back({i, decoded});
        return;
      }
      // On the sender's thread, so that this one issues the next steps meanwhile: what it
      // touches is this stream's (its decoder, its sink) and the thread-safe metrics, and
      // nothing reads the stream's decoder before the Drain below. (Never a backend call: the
      // finals aligned here, whose fallback runs the model, are sent from this thread.)
      const auto post_start = std::chrono::steady_clock::now();
      sender_.Post([&send, &sender_ms, i, decoded] { send(i, decoded, nullptr, sender_ms); });
      send_ms += MsSince(post_start);
    };
    whisper::GreedyBatchTimings timings;
    absl::StatusOr<std::vector<whisper::GreedyResult>> decoded =
        status.ok() ? whisper::DecodeGreedyBatch(model, vocabulary, prompts, greedy, *decoders_,
                                                 deliver, &timings)
                    : absl::StatusOr<std::vector<whisper::GreedyResult>>(status);
    if (!deferred.empty()) {
      std::vector<std::vector<int>> texts;
      for (const Deferred& d : deferred) {
        texts.push_back(
            rows[static_cast<size_t>(d.row)].stream->decoder.FinalTextTokens(d.decoded));
      }
      std::vector<whisper::WordAligner::AlignRequest> requests;
      for (size_t k = 0; k < deferred.size(); ++k) {
        requests.push_back(
            {.row = deferred[k].row,
             .text_tokens = texts[k],
             .audio_samples = rows[static_cast<size_t>(deferred[k].row)].job.audio.size()});
      }
      // Each final's host half (softmax, filters, DTW) on the window-preparation threads.
      const whisper::WordAligner::ForEachFn for_each =
          [this](size_t n, const std::function<void(size_t)>& fn) {
            prepare_pool_.ParallelFor(static_cast<int64_t>(n), [&](int64_t begin, int64_t end) {
              for (int64_t j = begin; j < end; ++j) fn(static_cast<size_t>(j));
            });
          };
      const auto align_start = std::chrono::steady_clock::now();
      const auto aligned =
          aligner->AlignBatch(requests, decoders_->ForRows(batch), for_each, &align_timings);
      align_ms = MsSince(align_start);
      for (size_t k = 0; k < deferred.size(); ++k) {
        const int i = deferred[k].row;
        send(
            i, deferred[k].decoded,
            [&, k, i](const std::vector<int>& text_tokens)
                -> absl::StatusOr<std::vector<whisper::TimedWord>> {
              if (text_tokens == texts[k]) return aligned[k];
              return aligner->Align(text_tokens, rows[static_cast<size_t>(i)].job.audio.size(),
                                    decoders_->Row(i));
            },
            send_ms);
      }
    }
    // Every result of the batch sent before its streams go back to the queue (their next
    // window's Prepare reads what Finish wrote) or are failed or closed.
    const auto drain_start = std::chrono::steady_clock::now();
    sender_.Drain();
    send_ms += MsSince(drain_start);
    const double decoder_ms = MsSince(decode_start);
    if (!decoded.ok()) {
      for (size_t i = 0; i < rows.size(); ++i) {
        if (!delivered[i]) FailRow(rows[i], decoded.status());
      }
      return;
    }
    if (options_.batch_observer) options_.batch_observer(batch);
    // Where a batch's time goes (waavd --log-level debug): the profile of issue 5's scaling.
    spdlog::debug(
        "batch of {}: encoder {:.2f} ms, prefill {:.2f} ms, {} steps {:.2f} ms "
        "({} row-steps, {} on the device, {} ahead, {} unread), sampling {:.2f} ms, decoder total "
        "{:.2f} ms "
        "(finals aligned {} in {:.2f} ms, results sent in {:.2f} ms), windows prepared in "
        "{:.2f} ms, prompts of up to {} tokens issued in {:.2f} ms; encoder passes {}: "
        "staging {:.2f} ms (first {:.2f}), uploads issued {:.2f} ms, replays issued {:.2f} ms, "
        "waiting {:.2f} ms; alignment: pass issued {:.2f} ms, waiting {:.2f} ms, host {:.2f} ms; "
        "sender thread {:.2f} ms; rows stopped at a restart {}, cut as repeats {}",
        batch, encode_ms, timings.prefill_ms, timings.steps, timings.step_ms, timings.row_steps,
        timings.device_steps, timings.pipelined_steps, timings.unread_steps, timings.sample_ms,
        decoder_ms, deferred.size(), align_ms, send_ms, prepare_ms, timings.prefill_tokens,
        timings.prefill_pass_ms, encode.passes, encode.staging_ms, encode.first_staging_ms,
        encode.upload_ms, encode.replay_ms, encode.wait_ms, align_timings.pass.issue_ms,
        align_timings.pass.wait_ms, align_timings.host_ms, sender_ms,
        std::count_if(decoded->begin(), decoded->end(), [](const auto& r) { return r.stopped; }),
        std::count_if(decoded->begin(), decoded->end(),
                      [](const auto& r) { return r.cut_repetition; }));
    int batch_steps = 1;
    for (const whisper::GreedyResult& r : *decoded) batch_steps = std::max(batch_steps, r.steps);
    // One observation per batch: every row of it shared each step.
    if (m != nullptr) m->Observe(metrics::Stage::kDecoderStep, decoder_ms / 1e3 / batch_steps);
    if (metrics::BatchMetrics* b = options_.batch_metrics) {
      // The encoder passes were observed in EncodeRows; a decoder step serves the rows still
      // decoding at it.
      for (int step = 0; step < batch_steps; ++step) {
        int live = 0;
        for (const whisper::GreedyResult& r : *decoded) live += r.steps > step ? 1 : 0;
        b->Observe(metrics::BatchModel::kWhisperDecoder, std::max(live, 1));
      }
    }
  }

  void Close(const std::shared_ptr<Stream>& stream, const absl::Status& status) {
    if (stream->done) return;
    stream->done = true;
    stream->cancelled.store(true);  // the frontend drops anything still queued for it
    {
      std::lock_guard lock(streams_mu_);
      streams_.erase(stream->id);
    }
    stream->sink->OnDone(status, SamplesToMs(stream->received_samples.load()));
  }

  const EngineOptions options_;
  const whisper::Transcriber& transcriber_;
  VoiceActivityModel& vad_;
  std::unique_ptr<whisper::DecoderStatePool> decoders_;  // max_batch slots
  ThreadPool prepare_pool_;  // driven by the scheduler thread (DecodeBatch)
  ResultSender sender_;      // results sent while the scheduler issues steps (DecodeBatch)
  // Views of one set of encoder buffers for 1, 2, 4, ... windows (encoders_[k]: 2^k rows).
  std::vector<std::unique_ptr<whisper::EncoderBuffers>> encoders_;
  // Buffers of short windows by (windows, positions) (EncoderFor).
  std::map<std::pair<int, int>, std::unique_ptr<whisper::EncoderBuffers>> short_encoders_;
  // Positions a short window is a multiple of; 0: whole windows only.
  const int short_window_positions_;
  // Two host buffers of the largest pass's windows (Backend::AllocateHost), for EncodeRows.
  std::array<HostBuffer, 2> mel_staging_;
  IngestRing ring_;

  mutable std::mutex streams_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Stream>> streams_;
  uint64_t next_id_ = 1;
  std::atomic<bool> accepting_{true};
  std::atomic<bool> stop_{false};

  std::mutex ready_mu_;
  std::condition_variable ready_cv_;
  std::deque<std::shared_ptr<Stream>> ready_;
  std::atomic<size_t> ready_depth_{0};  // ready_.size(), readable without the lock
  // Whether the scheduler's latest round left streams waiting (it took max_batch and more were
  // ready): then it is behind, and the pauses' partials, extra work, are not queued.
  std::atomic<bool> scheduler_behind_{false};

  std::thread frontend_;
  std::thread scheduler_;
};

absl::StatusOr<std::unique_ptr<StreamingEngine>> StreamingEngine::Create(
    const EngineOptions& options, const whisper::Transcriber& transcriber,
    VoiceActivityModel& vad) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(auto decoders,
                   whisper::DecoderStatePool::Create(transcriber.model(), options.max_batch));
  const whisper::WhisperModel& model = transcriber.model();
  int encoder_batch = options.encoder_batch;
  if (encoder_batch == 0)
    encoder_batch = model.batches_encoder() ? std::min(options.max_batch, 16) : 1;
  encoder_batch = std::bit_floor(static_cast<unsigned>(std::min(encoder_batch, options.max_batch)));
  std::vector<std::unique_ptr<whisper::EncoderBuffers>> encoders;
  ASSIGN_OR_RETURN(std::unique_ptr<whisper::EncoderBuffers> largest,
                   model.NewEncoderBuffers(encoder_batch));
  {
    // Zeroed, so that no pass ever reads uninitialised memory as a window.
    std::vector<char> zeros(largest->mel().size_bytes(), 0);
    RETURN_IF_ERROR(model.backend().CopyFromHost(zeros.data(), zeros.size(), largest->mel()));
  }
  std::array<HostBuffer, 2> mel_staging;
  for (HostBuffer& staging : mel_staging) {
    ASSIGN_OR_RETURN(staging, model.backend().AllocateHost(largest->mel().size_bytes()));
  }
  for (int size = 1; size < encoder_batch; size *= 2) {
    ASSIGN_OR_RETURN(auto view, largest->Rows(0, size));
    encoders.push_back(std::move(view));
  }
  encoders.push_back(std::move(largest));
  return std::unique_ptr<StreamingEngine>(
      new StreamingEngine(std::make_unique<Impl>(options, transcriber, vad, std::move(decoders),
                                                 std::move(encoders), std::move(mel_staging))));
}

StreamingEngine::StreamingEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StreamingEngine::~StreamingEngine() = default;

absl::StatusOr<uint64_t> StreamingEngine::OpenStream(const StreamOptions& options,
                                                     std::shared_ptr<StreamSink> sink) {
  return impl_->Open(options, std::move(sink));
}
absl::Status StreamingEngine::PushAudio(uint64_t id, absl::Span<const float> samples) {
  return impl_->Push(id, samples);
}
absl::Status StreamingEngine::FinishStream(uint64_t id) { return impl_->Finish(id); }
void StreamingEngine::CancelStream(uint64_t id) { impl_->Cancel(id); }
void StreamingEngine::StopAccepting() { impl_->StopAccepting(); }
int StreamingEngine::active_streams() const { return impl_->Active(); }
size_t StreamingEngine::ingest_depth() const { return impl_->IngestDepth(); }
size_t StreamingEngine::ingest_capacity() const { return impl_->IngestCapacity(); }
size_t StreamingEngine::scheduler_depth() const { return impl_->SchedulerDepth(); }

}  // namespace waav::streaming
