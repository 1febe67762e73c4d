#include "server/stream_reactor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/status_mapping.h"
#include "server/stream_responses.h"
#include "spdlog/spdlog.h"

namespace waav::server {

// The engine's view of a stream: forwards its output to the reactor until the reactor detaches
// (in OnDone). Shared by the reactor and the engine; holds the admission slot.
class EngineSink final : public streaming::StreamSink {
 public:
  EngineSink(StreamReactor* reactor, std::unique_ptr<Admission::Slot> slot)
      : reactor_(reactor), slot_(std::move(slot)) {}

  // After this returns the engine's calls no longer reach the reactor. `release_slot`: the
  // engine never had this session, so its admission slot is free now (otherwise the engine's
  // OnDone frees it).
  void Detach(bool release_slot) {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
    if (release_slot) slot_.reset();
  }

  void OnSpeechStarted(int index, int64_t offset_ms, int64_t detected_ms) override {
    absl::MutexLock lock(&mu_);
    if (reactor_ != nullptr) reactor_->OnEngineSpeechStarted(index, offset_ms, detected_ms);
  }
  void OnResult(const streaming::RecognitionResult& result) override {
    absl::MutexLock lock(&mu_);
    if (reactor_ != nullptr) reactor_->OnEngineResult(result);
  }
  void OnSpeechEnded(int index, int64_t offset_ms, int64_t detected_ms) override {
    absl::MutexLock lock(&mu_);
    if (reactor_ != nullptr) reactor_->OnEngineSpeechEnded(index, offset_ms, detected_ms);
  }
  // The engine's last call for the session: its slot is free from here on.
  void OnDone(absl::Status status, int64_t processed_audio_ms) override {
    absl::MutexLock lock(&mu_);
    if (reactor_ != nullptr) reactor_->OnEngineDone(status, processed_audio_ms);
    slot_.reset();
  }

 private:
  absl::Mutex mu_;
  StreamReactor* reactor_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Admission::Slot> slot_ ABSL_GUARDED_BY(mu_);
};

namespace {

constexpr int kSampleRateHz = 16000;
// Audio handed to the engine per PushAudio call: the ring takes a push whole or not at all, so
// a large message goes in pieces that fit even a small ring.
constexpr size_t kPushSamples = 16000;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double SecondsBetween(StreamReactor::Clock::time_point a, StreamReactor::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

StreamReactor::StreamReactor(const ServiceRuntime& runtime, grpc::CallbackServerContext* context,
                             uint64_t serial)
    : runtime_(runtime),
      context_(context),
      serial_(serial),
      peer_(context->peer()),
      created_(Clock::now()) {
  absl::Status refusal;
  absl::string_view reason;
  std::unique_ptr<Admission::Slot> slot;
  if (runtime_.state->draining()) {
    refusal = absl::UnavailableError(
        "the server is shutting down and accepts no new streams; retry on another instance");
    reason = "draining";
  } else if (!runtime_.state->loaded()) {
    refusal = absl::UnavailableError("the server is still loading its models; retry shortly");
    reason = "overload";
  } else if ((slot = runtime_.admission->TryAcquire()) == nullptr) {
    refusal = absl::ResourceExhaustedError(
        absl::StrCat("the server is at its limit of ", runtime_.admission->max_streams(),
                     " concurrent streams; retry later with backoff, or use another instance"));
    reason = "capacity";
  }
  // gRPC holds back every operation started here until this reactor is returned to it, so no
  // reaction (and no OnDone) can run before the constructor is over.
  {
    absl::MutexLock lock(&mu_);
    if (!refusal.ok()) {
      runtime_.metrics->rejections(reason).Inc();
      state_ = State::kRefused;
      final_status_ = ToGrpcStatus(refusal, "");
      Finish(final_status_);
      return;
    }
    sink_ = std::make_shared<EngineSink>(this, std::move(slot));
    runtime_.metrics->streams_started().Inc();
    max_samples_16k_ = static_cast<int64_t>(runtime_.config->max_stream_duration_s * kSampleRateHz);
    last_message_ = created_;
    StartReadLocked();
  }
  runtime_.watchdog->Register(this);  // not under mu_: the watchdog's lock comes first
}

// ---- Reads --------------------------------------------------------------------------------------

void StreamReactor::StartReadLocked() {
  if (read_in_flight_ || state_ >= State::kClosing) return;
  read_in_flight_ = true;
  read_started_ = Clock::now();
  request_.Clear();
  StartRead(&request_);
}

void StreamReactor::OnReadDone(bool ok) {
  std::string audio;
  {
    absl::MutexLock lock(&mu_);
    read_in_flight_ = false;
    if (state_ >= State::kClosing) {
      MaybeFinishLocked();
      return;
    }
    if (!ok) {
      // The client half-closed, or the call is gone (OnCancel handles that case).
      if (!context_->IsCancelled()) HandleHalfCloseLocked();
      return;
    }
    last_message_ = Clock::now();
    if (state_ == State::kAwaitingConfig) {
      HandleConfigLocked();
      return;
    }
    if (state_ == State::kFinishing) {
      // Single utterance over (or the stream's audio limit reached): audio is ignored.
      StartReadLocked();
      return;
    }
    switch (request_.request_case()) {
      case v1::StreamingRecognizeRequest::kConfig:
        CloseLocked(absl::InvalidArgumentError(
            "a second config: only the first message of a stream may be a config"));
        return;
      case v1::StreamingRecognizeRequest::kAudio:
        break;
      default:
        CloseLocked(absl::InvalidArgumentError(
            "a message with neither config nor audio set (empty audio bytes are fine)"));
        return;
    }
    if (request_.audio().empty()) {
      StartReadLocked();
      return;
    }
    audio = std::move(*request_.mutable_audio());
  }

  // Only the read path uses the decoder, and no read is in flight now.
  std::vector<float> samples;
  const absl::Status decoded = decoder_->Feed(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(audio.data()), audio.size()), &samples);

  absl::MutexLock lock(&mu_);
  if (state_ == State::kFinishing) {
    StartReadLocked();  // ended meanwhile by a single utterance or the duration limit
    return;
  }
  if (state_ != State::kStreaming) {
    MaybeFinishLocked();
    return;
  }
  if (!decoded.ok()) {
    CloseLocked(decoded);
    return;
  }
  AddAudioLocked(std::move(samples));
}

void StreamReactor::HandleConfigLocked() {
  if (request_.request_case() != v1::StreamingRecognizeRequest::kConfig) {
    CloseLocked(absl::InvalidArgumentError(absl::StrCat(
        "the first message of a stream must be a config; got ",
        request_.request_case() == v1::StreamingRecognizeRequest::kAudio ? "audio"
                                                                         : "an empty message")));
    return;
  }
  absl::StatusOr<StreamSetup> setup =
      ResolveStreamingConfig(request_.config(), *runtime_.config, *runtime_.model);
  if (!setup.ok()) {
    // A usable request id makes the error findable in the logs.
    auto id = ResolveRequestId(request_.config().request_id());
    if (id.ok() && !request_.config().request_id().empty()) request_id_ = *id;
    CloseLocked(setup.status());
    return;
  }
  request_id_ = setup->request_id;
  language_ = setup->language;
  single_utterance_ = setup->options.single_utterance;
  auto decoder = audio::StreamDecoder::Create(setup->format);
  if (!decoder.ok()) {
    CloseLocked(decoder.status());
    return;
  }
  decoder_ = std::move(*decoder);
  absl::StatusOr<uint64_t> id = runtime_.engine->OpenStream(setup->options, sink_);
  if (!id.ok()) {
    if (absl::IsResourceExhausted(id.status())) runtime_.metrics->rejections("capacity").Inc();
    if (absl::IsUnavailable(id.status())) runtime_.metrics->rejections("draining").Inc();
    CloseLocked(id.status());
    return;
  }
  engine_id_ = *id;
  state_ = State::kStreaming;
  streaming_since_ = Clock::now();
  const v1::AudioFormat& format = setup->effective.recognition().audio_format();
  spdlog::info(
      "stream {} start: request_id={} peer={} encoding={} rate_hz={} channels={} "
      "model={} interim={} single_utterance={}",
      serial_, request_id_, peer_, v1::AudioEncoding_Name(format.encoding()),
      format.sample_rate_hz(), format.channels(), runtime_.model->name,
      setup->effective.interim_results(), single_utterance_);

  Outgoing started;
  v1::StreamStarted* content = started.response.mutable_started();
  *content->mutable_effective_config() = std::move(setup->effective);
  *content->mutable_model() = runtime_.model->ToProto(runtime_.state->loaded());
  EnqueueLocked(std::move(started));
  StartReadLocked();
}

void StreamReactor::HandleHalfCloseLocked() {
  if (state_ == State::kAwaitingConfig) {
    CloseLocked(absl::InvalidArgumentError(
        "the stream ended before its config: send a StreamingRecognitionConfig first"));
    return;
  }
  if (state_ != State::kStreaming) return;  // already finishing
  std::vector<float> tail;
  const absl::Status status = decoder_->Finish(&tail);
  if (!status.ok()) {
    CloseLocked(status);
    return;
  }
  AddAudioLocked(std::move(tail));
  StopAudioLocked(/*stream_limit=*/false);
}

// ---- Audio into the engine ----------------------------------------------------------------------

void StreamReactor::AddAudioLocked(std::vector<float> samples) {
  // Audio reaching the duration limit ends the stream there (a stream of exactly the maximum
  // length that then half-closes ends normally).
  const int64_t room = std::max<int64_t>(0, max_samples_16k_ - samples_16k_);
  const bool limit = !samples.empty() && static_cast<int64_t>(samples.size()) >= room;
  if (static_cast<int64_t>(samples.size()) > room) samples.resize(static_cast<size_t>(room));
  samples_16k_ += static_cast<int64_t>(samples.size());
  pending_.insert(pending_.end(), samples.begin(), samples.end());
  if (limit && state_ == State::kStreaming) {
    StopAudioLocked(/*stream_limit=*/true);
    return;
  }
  // When the ring is full the stream stops reading; the watchdog retries and reads on.
  if (FlushLocked() && state_ == State::kStreaming) StartReadLocked();
}

void StreamReactor::StopAudioLocked(bool stream_limit) {
  if (state_ != State::kStreaming) return;
  if (stream_limit) {
    stream_limit_reached_ = true;
    spdlog::info("stream {}: maximum duration of {} s reached; finishing", serial_,
                 runtime_.config->max_stream_duration_s);
  }
  state_ = State::kFinishing;
  engine_finish_wanted_ = true;
  FlushLocked();
}

bool StreamReactor::FlushLocked() {
  if (!engine_id_ || engine_done_) {
    pending_.clear();
    pending_offset_ = 0;
    return true;
  }
  while (pending_offset_ < pending_.size()) {
    const size_t n = std::min(kPushSamples, pending_.size() - pending_offset_);
    const absl::Status status = runtime_.engine->PushAudio(
        *engine_id_, absl::MakeConstSpan(pending_.data() + pending_offset_, n));
    if (absl::IsResourceExhausted(status)) return false;
    if (absl::IsNotFound(status)) {
      // The engine already closed the session (single utterance over, or an engine error whose
      // OnDone is on its way): the rest of the audio has nowhere to go.
      pending_offset_ = pending_.size();
      break;
    }
    if (!status.ok()) {
      CloseLocked(status);
      return false;
    }
    pending_offset_ += n;
  }
  pending_.clear();
  pending_offset_ = 0;
  if (engine_finish_wanted_ && !engine_finish_sent_) {
    const absl::Status status = runtime_.engine->FinishStream(*engine_id_);
    if (absl::IsResourceExhausted(status)) return false;
    if (!status.ok() && !absl::IsNotFound(status)) {
      CloseLocked(status);
      return false;
    }
    engine_finish_sent_ = true;
  }
  return true;
}

// ---- Timers -------------------------------------------------------------------------------------

void StreamReactor::OnTick(Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  if (state_ >= State::kClosing) return;
  const bool flush_due =
      pending_offset_ < pending_.size() || (engine_finish_wanted_ && !engine_finish_sent_);
  if (flush_due && FlushLocked() && state_ == State::kStreaming) StartReadLocked();
  if (state_ >= State::kClosing) return;

  // Idle means neither side has said anything: while results still flow the client may be
  // waiting for the server (a backlog after a burst of audio), not the other way round.
  const auto idle = std::chrono::duration<double>(runtime_.config->idle_timeout_s);
  if ((state_ == State::kAwaitingConfig || state_ == State::kStreaming) && read_in_flight_ &&
      now - std::max({last_message_, read_started_, last_response_}) > idle) {
    CloseLocked(absl::DeadlineExceededError(absl::StrFormat(
        "no message for %g s (the server's idle timeout); send audio, or silence, steadily",
        runtime_.config->idle_timeout_s)));
    return;
  }
  const auto max_duration = std::chrono::duration<double>(runtime_.config->max_stream_duration_s);
  if (state_ == State::kStreaming && now - streaming_since_ > max_duration) {
    StopAudioLocked(/*stream_limit=*/true);
  }
}

void StreamReactor::Abort(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  CloseLocked(status);
}

// ---- Engine output ------------------------------------------------------------------------------

void StreamReactor::EnqueueEventLocked(v1::SpeechEvent::Type type, int utterance_index,
                                       int64_t offset_ms, int64_t detected_at_ms) {
  Outgoing out;
  FillSpeechEvent(type, utterance_index, offset_ms, detected_at_ms, out.response.mutable_event());
  EnqueueLocked(std::move(out));
}

void StreamReactor::OnEngineSpeechStarted(int utterance_index, int64_t offset_ms,
                                          int64_t detected_at_ms) {
  absl::MutexLock lock(&mu_);
  if (state_ >= State::kClosing) return;
  processed_ms_ = std::max(processed_ms_, detected_at_ms);
  EnqueueEventLocked(v1::SpeechEvent::SPEECH_STARTED, utterance_index, offset_ms, detected_at_ms);
}

void StreamReactor::OnEngineResult(const streaming::RecognitionResult& result) {
  const int64_t arrived_ns = NowNs();
  absl::MutexLock lock(&mu_);
  if (state_ >= State::kClosing) return;
  compute_ms_ += result.latency.encoder_ms + result.latency.decoder_ms;
  processed_ms_ = std::max(processed_ms_, result.end_ms);
  Outgoing out;
  out.created_ns = arrived_ns;
  out.is_result = true;
  FillResult(result, language_, stream_limit_reached_, out.response.mutable_result());
  KeepStableWords(out.response.mutable_result(), &stable_words_);
  if (result.is_final) {
    held_final_ = std::move(out);
    return;
  }
  last_interim_ = out.response.result();
  EnqueueLocked(std::move(out));
}

void StreamReactor::OnEngineSpeechEnded(int utterance_index, int64_t offset_ms,
                                        int64_t detected_at_ms) {
  absl::MutexLock lock(&mu_);
  if (state_ >= State::kClosing) return;
  processed_ms_ = std::max(processed_ms_, detected_at_ms);
  EnqueueEventLocked(v1::SpeechEvent::SPEECH_ENDED, utterance_index, offset_ms, detected_at_ms);
  if (single_utterance_) {
    EnqueueEventLocked(v1::SpeechEvent::END_OF_SINGLE_UTTERANCE, utterance_index, offset_ms,
                       detected_at_ms);
    if (state_ == State::kStreaming) {
      // Further audio is ignored; the engine reports done after this utterance.
      state_ = State::kFinishing;
      pending_.clear();
      pending_offset_ = 0;
      StartReadLocked();
    }
  }
  if (held_final_) {
    EnqueueLocked(std::move(*held_final_));
  } else if (last_interim_) {
    // Interim text was shown but the engine found no words in the end: the client still gets
    // the utterance's one final result (the API's promise), holding what was stable.
    Outgoing out;
    out.created_ns = NowNs();
    FinalFromLastInterim(*last_interim_, out.response.mutable_result());
    if (engine_finish_sent_) {
      out.response.mutable_result()->set_end_reason(stream_limit_reached_
                                                        ? v1::UTTERANCE_END_REASON_STREAM_LIMIT
                                                        : v1::UTTERANCE_END_REASON_END_OF_AUDIO);
    }
    EnqueueLocked(std::move(out));
  }
  held_final_.reset();
  last_interim_.reset();
  stable_words_.clear();
}

void StreamReactor::OnEngineDone(const absl::Status& status, int64_t processed_audio_ms) {
  absl::MutexLock lock(&mu_);
  engine_done_ = true;
  processed_ms_ = std::max(processed_ms_, processed_audio_ms);
  if (state_ >= State::kClosing) {
    MaybeFinishLocked();
    return;
  }
  if (held_final_) {  // the engine always follows a final with SPEECH_ENDED; never drop one
    EnqueueLocked(std::move(*held_final_));
    held_final_.reset();
  }
  if (!status.ok()) {
    spdlog::error("stream {} (request_id {}): the engine ended the session: {}", serial_,
                  request_id_, status.ToString());
    CloseLocked(status);
  } else if (stream_limit_reached_) {
    CloseLocked(absl::DeadlineExceededError(absl::StrFormat(
        "the stream reached the server's maximum duration of %g s; results for the audio up to "
        "it were sent; start a new stream to continue",
        runtime_.config->max_stream_duration_s)));
  } else {
    CloseLocked(absl::OkStatus());
  }
}

// ---- Writes -------------------------------------------------------------------------------------

void StreamReactor::EnqueueLocked(Outgoing out) {
  if (state_ >= State::kClosing) return;
  last_response_ = Clock::now();
  queue_.push_back(std::move(out));
  StartWriteLocked();
}

void StreamReactor::StartWriteLocked() {
  if (write_in_flight_ || queue_.empty()) return;
  writing_ = std::move(queue_.front());
  queue_.pop_front();
  v1::StreamingRecognizeResponse& response = writing_.response;
  response.set_request_id(request_id_);
  response.set_processed_audio_ms(ToApiMs(processed_ms_));
  if (writing_.is_result) {
    // Processing: from the engine's output to the response handed to gRPC.
    const double processing_ms = static_cast<double>(NowNs() - writing_.created_ns) / 1e6;
    v1::ResultLatency* latency = response.mutable_result()->mutable_latency();
    latency->set_processing_ms(static_cast<float>(processing_ms));
    latency->set_server_ms(static_cast<float>(latency->ingest_wait_ms() + latency->frontend_ms() +
                                              latency->queue_ms() + latency->encoder_ms() +
                                              latency->decoder_ms() + processing_ms));
    latency->set_audio_to_result_ms(
        static_cast<float>(latency->audio_to_result_ms() + processing_ms));
    if (runtime_.stage_metrics != nullptr) {
      runtime_.stage_metrics->Observe(metrics::Stage::kProcessing, processing_ms / 1e3);
    }
  }
  write_in_flight_ = true;
  write_started_ = Clock::now();
  StartWrite(&response);
}

void StreamReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_in_flight_ = false;
  if (writing_.is_result && runtime_.stage_metrics != nullptr) {
    runtime_.stage_metrics->Observe(metrics::Stage::kOutput,
                                    SecondsBetween(write_started_, Clock::now()));
  }
  if (!ok) {
    queue_.clear();
    CloseLocked(absl::CancelledError("the client went away"));
  } else {
    StartWriteLocked();
  }
  MaybeFinishLocked();
}

// ---- Ending -------------------------------------------------------------------------------------

void StreamReactor::CloseLocked(const absl::Status& status) {
  if (state_ >= State::kClosing) return;
  state_ = State::kClosing;
  final_status_ = ToGrpcStatus(status, request_id_);
  held_final_.reset();
  if (engine_id_ && !engine_done_) runtime_.engine->CancelStream(*engine_id_);
  MaybeFinishLocked();
}

void StreamReactor::MaybeFinishLocked() {
  if (state_ != State::kClosing || write_in_flight_ || !queue_.empty()) return;
  // An error ends the session before the engine's OnDone; a clean end waits for it (it is what
  // decided the status).
  state_ = State::kFinished;
  Finish(final_status_);
}

void StreamReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  queue_.clear();
  CloseLocked(absl::CancelledError("the client cancelled the stream or disconnected"));
}

void StreamReactor::LogEndAndCount() {
  const double duration_s = SecondsBetween(created_, Clock::now());
  const double audio_s = static_cast<double>(samples_16k_) / kSampleRateHz;
  const grpc::StatusCode code = final_status_.error_code();
  if (state_ == State::kRefused) {
    spdlog::debug("stream {} refused: peer={} status={} {}", serial_, peer_, StatusCodeName(code),
                  final_status_.error_message());
    return;
  }
  spdlog::info(
      "stream {} end: request_id={} peer={} duration_s={:.3f} audio_s={:.3f} status={}{}{}",
      serial_, request_id_, peer_, duration_s, audio_s, StatusCodeName(code),
      code == grpc::StatusCode::OK ? "" : " ", final_status_.error_message());
  ServerMetrics& m = *runtime_.metrics;
  m.streams_finished(OutcomeLabel(code)).Inc();
  m.audio_seconds().Add(audio_s);
  m.compute_seconds().Add(compute_ms_ / 1e3);
  if (audio_s > 0) m.real_time_factor().Observe(compute_ms_ / 1e3 / audio_s);
}

void StreamReactor::OnDone() {
  // Not under mu_ (the watchdog's lock comes first); a no-op for a refused stream.
  runtime_.watchdog->Unregister(this);
  bool engine_session = false;
  {
    absl::MutexLock lock(&mu_);
    engine_session = engine_id_.has_value();
    if (engine_id_ && !engine_done_) runtime_.engine->CancelStream(*engine_id_);
    LogEndAndCount();
  }
  if (sink_ != nullptr) sink_->Detach(/*release_slot=*/!engine_session);
  delete this;
}

grpc::ServerBidiReactor<v1::StreamingRecognizeRequest, v1::StreamingRecognizeResponse>*
NewStreamReactor(const ServiceRuntime& runtime, grpc::CallbackServerContext* context,
                 uint64_t serial) {
  return new StreamReactor(runtime, context, serial);
}

}  // namespace waav::server
