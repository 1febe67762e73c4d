#include "load-tests/load_stream.h"

#include <algorithm>
#include <utility>

namespace waav::load {

LoadStream::LoadStream(std::shared_ptr<const cli::ClientAudio> audio,
                       const StreamSettings& settings, std::string request_id, int slot,
                       Clock::time_point step_start, std::function<void(LoadStream*)> on_done)
    : audio_(std::move(audio)),
      settings_(settings),
      on_done_(std::move(on_done)),
      step_start_(step_start) {
  record_.file = audio_->name;
  record_.request_id = std::move(request_id);
  record_.slot = slot;
  record_.speed = settings.speed;
  record_.audio_us = audio_->duration_us;
}

double LoadStream::Since(Clock::time_point t) const {
  return std::chrono::duration<double>(t - t0_).count();
}

std::optional<Clock::time_point> LoadStream::Start(v1::Recognizer::Stub* stub) {
  t0_ = Clock::now();
  record_.started_s = std::chrono::duration<double>(t0_ - step_start_).count();
  if (settings_.deadline_s > 0) {
    context_.set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::milliseconds(static_cast<int64_t>(settings_.deadline_s * 1000)));
  }
  v1::StreamingRecognitionConfig* config = request_.mutable_config();
  v1::RecognitionConfig* recognition = config->mutable_recognition();
  *recognition->mutable_audio_format() = audio_->format;
  recognition->set_model(settings_.model);
  recognition->set_language(settings_.language);
  recognition->set_enable_word_time_offsets(settings_.word_time_offsets);
  config->set_interim_results(settings_.interim_results);
  if (settings_.silence_ms != 0)
    config->mutable_endpointing()->set_silence_ms(settings_.silence_ms);
  config->set_request_id(record_.request_id);

  stub->async()->StreamingRecognize(&context_, this);
  const bool paced = settings_.speed > 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = true;
    if (!paced) due_ = audio_->chunks.size();
  }
  AddHold();  // released when the writer is finished (see DecideLocked)
  StartWrite(&request_);
  StartRead(&response_);
  StartCall();
  if (!paced || audio_->chunks.empty()) return std::nullopt;
  return cli::ChunkDueTime(t0_, audio_->chunks[0].end_us, settings_.speed);
}

std::optional<Clock::time_point> LoadStream::OnDue() {
  Action action;
  size_t next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (writer_closed_) return std::nullopt;
    due_ = std::min(due_ + 1, audio_->chunks.size());
    next = due_;
    action = DecideLocked();
  }
  Perform(action);
  if (next >= audio_->chunks.size()) return std::nullopt;
  return cli::ChunkDueTime(t0_, audio_->chunks[next].end_us, settings_.speed);
}

LoadStream::Action LoadStream::DecideLocked() {
  if (writer_closed_ || in_flight_) return Action::kNone;
  if (read_done_) {  // the server ended the stream: stop writing
    writer_closed_ = true;
    return Action::kReleaseHold;
  }
  if (sent_ < due_) {
    const cli::AudioChunk& chunk = audio_->chunks[sent_];
    if (settings_.speed > 0) {
      const double late_ms =
          std::chrono::duration<double, std::milli>(
              Clock::now() - cli::ChunkDueTime(t0_, chunk.end_us, settings_.speed))
              .count();
      record_.max_send_delay_ms = std::max(record_.max_send_delay_ms, late_ms);
    }
    request_.set_audio(audio_->bytes.data() + chunk.begin, chunk.end - chunk.begin);
    sent_audio_us_ = chunk.end_us;
    ++sent_;
    in_flight_ = true;
    return Action::kWrite;
  }
  if (sent_ == audio_->chunks.size() && !writes_done_) {
    writes_done_ = true;
    in_flight_ = true;
    return Action::kWritesDone;
  }
  return Action::kNone;
}

void LoadStream::Perform(Action action) {
  switch (action) {
    case Action::kWrite:
      StartWrite(&request_);
      break;
    case Action::kWritesDone:
      StartWritesDone();
      break;
    case Action::kReleaseHold:
      RemoveHold();
      break;
    case Action::kNone:
      break;
  }
}

void LoadStream::OnWriteDone(bool ok) {
  Action action;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = false;
    if (!ok) {  // the call is over; its status tells why
      writer_closed_ = true;
      action = Action::kReleaseHold;
    } else {
      action = DecideLocked();
    }
  }
  Perform(action);
}

void LoadStream::OnWritesDoneDone(bool ok) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = false;
    writer_closed_ = true;
  }
  RemoveHold();
}

void LoadStream::OnReadDone(bool ok) {
  if (!ok) {
    Action action;
    {
      std::lock_guard<std::mutex> lock(mu_);
      read_done_ = true;
      action = DecideLocked();
    }
    Perform(action);
    return;
  }
  const double now_s = Since(Clock::now());
  int64_t sent_us;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sent_us = sent_audio_us_;
  }
  record_.last_processed_ms = response_.processed_audio_ms();
  record_.max_backlog_ms = std::max(record_.max_backlog_ms, static_cast<double>(sent_us) / 1000.0 -
                                                                response_.processed_audio_ms());
  if (!response_.request_id().empty()) record_.request_id = response_.request_id();
  switch (response_.content_case()) {
    case v1::StreamingRecognizeResponse::kStarted:
      record_.got_started = true;
      break;
    case v1::StreamingRecognizeResponse::kResult:
      record_.results.push_back(ObserveResult(response_.result(), now_s));
      break;
    case v1::StreamingRecognizeResponse::kEvent:
      record_.events.push_back({now_s, response_.event().type(),
                                response_.event().utterance_index(),
                                response_.event().offset_ms()});
      break;
    default:
      break;
  }
  StartRead(&response_);
}

void LoadStream::OnDone(const grpc::Status& status) {
  record_.done_s = Since(Clock::now());
  record_.code = status.error_code();
  record_.message = status.error_message();
  // The owner may delete this stream once told: call a copy, and touch nothing after.
  const std::function<void(LoadStream*)> done = on_done_;
  done(this);
}

}  // namespace waav::load
