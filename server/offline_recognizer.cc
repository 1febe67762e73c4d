#include "server/offline_recognizer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/audio/stream_decoder.h"
#include "engine/runtime/backend_registry.h"
#include "engine/runtime/status.h"
#include "server/request_config.h"
#include "server/stream_responses.h"

namespace waav::server {
namespace {

// Input fed to the decoder per call: small enough that no encoding expands one piece past the
// decoder's per-call limit (600 s; Opus at 6 kbit/s makes ~87 s of 64 KiB).
constexpr size_t kFeedBytes = size_t{64} * 1024;

// Words of a segment with times spread over it in proportion to their characters: the fallback
// when the model has no alignment heads (as streaming finals fall back).
void FillEstimatedWords(const std::string& text, uint32_t start_ms, uint32_t end_ms,
                        float confidence, v1::SpeechRecognitionAlternative* alternative) {
  std::vector<std::string> words = absl::StrSplit(text, ' ', absl::SkipEmpty());
  size_t total = 0;
  for (const std::string& w : words) total += w.size();
  size_t before = 0;
  const double duration = static_cast<double>(end_ms - start_ms);
  for (const std::string& w : words) {
    v1::WordInfo* word = alternative->add_words();
    word->set_word(w);
    word->set_start_ms(start_ms +
                       static_cast<uint32_t>(duration * before / std::max<size_t>(1, total)));
    before += w.size();
    word->set_end_ms(start_ms +
                     static_cast<uint32_t>(duration * before / std::max<size_t>(1, total)));
    word->set_confidence(confidence);
    word->set_stable(true);
  }
}

// The segment's words as the Transcriber aligned them (cross-attention DTW, faster-whisper's
// word split and clean-ups: what `waav transcribe --json --word-timestamps` prints), in ms.
void FillAlignedWords(const std::vector<whisper::Word>& words,
                      v1::SpeechRecognitionAlternative* alternative) {
  for (const whisper::Word& w : words) {
    const std::string text(absl::StripAsciiWhitespace(w.word));
    if (text.empty()) continue;
    v1::WordInfo* word = alternative->add_words();
    word->set_word(text);
    word->set_start_ms(ToApiMs(std::llround(w.start_s * 1000)));
    word->set_end_ms(std::max(word->start_ms(), ToApiMs(std::llround(w.end_s * 1000))));
    word->set_confidence(w.probability);
    word->set_stable(true);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<OfflineRecognizer>> OfflineRecognizer::Create(
    const ServerConfig& config) {
  std::unique_ptr<OfflineRecognizer> pool(new OfflineRecognizer(config.max_queued_recognize));
  BackendOptions options;
  options.num_threads = config.threads;
  options.device_index = config.gpu_device;
  options.gpu_l2_encoder_bytes = int64_t{config.gpu_l2_encoder_mb} << 20;
  pool->workers_.resize(static_cast<size_t>(config.offline_workers));
  for (Worker& worker : pool->workers_) {
    ASSIGN_OR_RETURN(worker.backend, CreateBackend(config.backend, options));
    ASSIGN_OR_RETURN(worker.transcriber,
                     whisper::Transcriber::Load(config.model_dir, *worker.backend));
  }
  for (Worker& worker : pool->workers_) {
    const whisper::Transcriber* transcriber = worker.transcriber.get();
    OfflineRecognizer* self = pool.get();
    worker.thread = std::thread([self, transcriber] { self->Loop(transcriber); });
  }
  return pool;
}

OfflineRecognizer::~OfflineRecognizer() { Shutdown(); }

std::vector<const Backend*> OfflineRecognizer::backends() const {
  std::vector<const Backend*> result;
  for (const Worker& worker : workers_) result.push_back(worker.backend.get());
  return result;
}

bool OfflineRecognizer::Submit(Job job) {
  absl::MutexLock lock(&mu_);
  // Room: a worker for each idle one, plus max_queued_ waiting.
  const int idle = static_cast<int>(workers_.size()) - running_;
  if (stopping_ || static_cast<int>(queue_.size()) >= max_queued_ + std::max(0, idle)) {
    return false;
  }
  queue_.push_back(std::move(job));
  return true;
}

int OfflineRecognizer::outstanding() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size()) + running_;
}

void OfflineRecognizer::Loop(const whisper::Transcriber* transcriber) {
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](OfflineRecognizer* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    job(transcriber);
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

void OfflineRecognizer::Shutdown() {
  std::deque<Job> abandoned;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    abandoned.swap(queue_);
  }
  for (Job& job : abandoned) job(nullptr);
  for (Worker& worker : workers_) {
    if (worker.thread.joinable()) worker.thread.join();
  }
}

absl::Status RunRecognize(const whisper::Transcriber& transcriber,
                          const v1::RecognizeRequest& request, const OfflineSetup& setup,
                          double max_duration_s, v1::RecognizeResponse* response) {
  ASSIGN_OR_RETURN(std::unique_ptr<audio::StreamDecoder> decoder,
                   audio::StreamDecoder::Create(setup.format));
  std::vector<float> samples;
  const std::string& bytes = request.audio();
  const size_t max_samples = static_cast<size_t>(max_duration_s * audio::kWhisperSampleRateHz);
  for (size_t offset = 0; offset < bytes.size(); offset += kFeedBytes) {
    const size_t n = std::min(kFeedBytes, bytes.size() - offset);
    RETURN_IF_ERROR(decoder->Feed(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()) + offset, n), &samples));
    if (samples.size() > max_samples) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the audio is longer than the server's maximum of %g s; stream it with "
                          "StreamingRecognize in parts",
                          max_duration_s));
    }
  }
  RETURN_IF_ERROR(decoder->Finish(&samples));
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the audio holds no complete sample (", bytes.size(), " bytes of ",
                     audio::AudioEncodingName(setup.format.encoding), ")"));
  }
  if (decoder->input_sample_rate_hz() > 0) {
    response->set_audio_duration_ms(
        ToApiMs(decoder->input_samples_decoded() * 1000 / decoder->input_sample_rate_hz()));
  }
  // Word offsets asked for: aligned from cross-attention when the model lists alignment heads,
  // as `waav transcribe --word-timestamps` does (which, like faster-whisper's
  // word_timestamps=True, also starts each next 30 s window at the last word's end).
  whisper::TranscribeOptions options;
  options.word_timestamps = setup.word_time_offsets && transcriber.word_aligner() != nullptr;
  ASSIGN_OR_RETURN(whisper::Transcript transcript, transcriber.Transcribe(samples, options));
  std::vector<const whisper::Segment*> segments;
  for (const whisper::Segment& segment : transcript.segments) {
    if (!absl::StripAsciiWhitespace(segment.text).empty()) segments.push_back(&segment);
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const whisper::Segment& segment = *segments[i];
    v1::RecognitionResult* result = response->add_results();
    v1::SpeechRecognitionAlternative* alternative = result->add_alternatives();
    const std::string text(absl::StripAsciiWhitespace(segment.text));
    const float confidence = static_cast<float>(std::exp(segment.avg_logprob));
    alternative->set_transcript(text);
    alternative->set_confidence(confidence);
    result->set_start_ms(ToApiMs(std::llround(segment.start_s * 1000)));
    result->set_end_ms(std::max(result->start_ms(), ToApiMs(std::llround(segment.end_s * 1000))));
    result->set_end_reason(i + 1 == segments.size() ? v1::UTTERANCE_END_REASON_END_OF_AUDIO
                                                    : v1::UTTERANCE_END_REASON_SILENCE);
    result->set_language(setup.language);
    if (setup.word_time_offsets) {
      if (!segment.words.empty()) {
        FillAlignedWords(segment.words, alternative);
      } else {
        FillEstimatedWords(text, result->start_ms(), result->end_ms(), confidence, alternative);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace waav::server
