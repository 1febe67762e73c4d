#include "tests/support/fake_recognizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/audio/stream_decoder.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace waav::testing {
namespace {

using v1::StreamingRecognizeResponse;

constexpr char kServiceName[] = "waav.v1.Recognizer";

grpc::StatusCode CodeFromName(const std::string& name) {
  static const std::pair<const char*, grpc::StatusCode> kCodes[] = {
      {"CANCELLED", grpc::StatusCode::CANCELLED},
      {"UNKNOWN", grpc::StatusCode::UNKNOWN},
      {"INVALID_ARGUMENT", grpc::StatusCode::INVALID_ARGUMENT},
      {"DEADLINE_EXCEEDED", grpc::StatusCode::DEADLINE_EXCEEDED},
      {"NOT_FOUND", grpc::StatusCode::NOT_FOUND},
      {"FAILED_PRECONDITION", grpc::StatusCode::FAILED_PRECONDITION},
      {"RESOURCE_EXHAUSTED", grpc::StatusCode::RESOURCE_EXHAUSTED},
      {"UNIMPLEMENTED", grpc::StatusCode::UNIMPLEMENTED},
      {"INTERNAL", grpc::StatusCode::INTERNAL},
      {"UNAVAILABLE", grpc::StatusCode::UNAVAILABLE},
  };
  for (const auto& [n, code] : kCodes) {
    if (name == n) return code;
  }
  return grpc::StatusCode::UNKNOWN;
}

// Checks an AudioFormat as waavd does (the parts a client can get wrong) and makes a decoder
// that counts stream time.
grpc::Status MakeDecoder(const v1::AudioFormat& format,
                         std::unique_ptr<audio::StreamDecoder>* decoder) {
  if (format.encoding() == v1::AUDIO_ENCODING_UNSPECIFIED) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "recognition.audio_format.encoding is AUDIO_ENCODING_UNSPECIFIED"};
  }
  audio::AudioFormatSpec spec;
  spec.encoding = static_cast<audio::AudioEncoding>(format.encoding());
  spec.sample_rate_hz = static_cast<int>(format.sample_rate_hz());
  spec.channels = static_cast<int>(format.channels());
  audio::StreamDecoderOptions options;
  options.output_sample_rate_hz = 0;
  auto created = audio::StreamDecoder::Create(spec, options);
  if (!created.ok()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, std::string(created.status().message())};
  }
  *decoder = std::move(*created);
  return grpc::Status::OK;
}

uint32_t StreamTimeMs(const audio::StreamDecoder& decoder) {
  const int rate = decoder.input_sample_rate_hz();
  if (rate <= 0) return 0;
  return static_cast<uint32_t>(decoder.input_samples_decoded() * 1000 / rate);
}

// Fills `alternative` with the words of `utterance` that end by `until_ms`; returns how many.
size_t FillWords(const FakeUtterance& utterance, uint32_t until_ms, bool with_words, bool final,
                 v1::SpeechRecognitionAlternative* alternative, std::string* stable) {
  std::vector<std::string> texts;
  for (const FakeWord& w : utterance.words) {
    if (w.end_ms <= until_ms) texts.push_back(w.text);
  }
  const size_t n_stable = final ? texts.size() : (texts.empty() ? 0 : texts.size() - 1);
  alternative->set_transcript(absl::StrJoin(texts, " "));
  *stable = absl::StrJoin(texts.begin(), texts.begin() + static_cast<ptrdiff_t>(n_stable), " ");
  if (final) alternative->set_confidence(0.9f);
  if (with_words) {
    for (size_t i = 0; i < texts.size(); ++i) {
      const FakeWord& w = utterance.words[i];
      v1::WordInfo* info = alternative->add_words();
      info->set_word(w.text);
      info->set_start_ms(w.start_ms);
      info->set_end_ms(w.end_ms);
      info->set_confidence(0.9f);
      info->set_stable(i < n_stable);
    }
  }
  return texts.size();
}

// The per-stream script player.
class Player {
 public:
  Player(const FakeRecognizerOptions& options, const v1::StreamingRecognitionConfig& config,
         std::string request_id)
      : options_(options),
        interim_(!config.has_interim_results() || config.interim_results()),
        words_(options.send_words && config.recognition().enable_word_time_offsets()),
        silence_ms_(config.endpointing().has_silence_ms() ? config.endpointing().silence_ms()
                                                          : options.silence_ms),
        request_id_(std::move(request_id)),
        states_(options.script.size()) {}

  // The responses due once `t_ms` of audio is in (end_of_audio: the client half-closed).
  std::vector<StreamingRecognizeResponse> Advance(uint32_t t_ms, bool end_of_audio) {
    std::vector<StreamingRecognizeResponse> out;
    for (size_t k = 0; k < options_.script.size(); ++k) {
      const FakeUtterance& u = options_.script[k];
      State& s = states_[k];
      if (s.finished || u.words.empty()) continue;
      if (!s.started) {
        if (t_ms < u.start_ms() + options_.min_speech_ms) break;  // later ones wait for this
        s.started = true;
        s.next_interim_ms = u.start_ms() + options_.min_speech_ms;
        out.push_back(Event(t_ms, v1::SpeechEvent::SPEECH_STARTED, k, u.start_ms(),
                            u.start_ms() + options_.min_speech_ms));
      }
      const uint32_t endpoint_ms = u.end_ms() + silence_ms_;
      while (interim_ && s.next_interim_ms <= std::min(t_ms, endpoint_ms - 1)) {
        StreamingRecognizeResponse r = Result(t_ms, k, s.next_interim_ms, false);
        if (!r.result().alternatives(0).transcript().empty()) out.push_back(std::move(r));
        s.next_interim_ms += options_.interim_every_ms;
      }
      if (t_ms >= endpoint_ms || end_of_audio) {
        const uint32_t end_ms = std::min(u.end_ms(), t_ms);
        out.push_back(Event(t_ms, v1::SpeechEvent::SPEECH_ENDED, k, end_ms,
                            t_ms >= endpoint_ms ? endpoint_ms : t_ms));
        StreamingRecognizeResponse r = Result(t_ms, k, end_ms, true);
        r.mutable_result()->set_end_reason(t_ms >= endpoint_ms
                                               ? v1::UTTERANCE_END_REASON_SILENCE
                                               : v1::UTTERANCE_END_REASON_END_OF_AUDIO);
        out.push_back(std::move(r));
        s.finished = true;
        continue;
      }
      break;  // nothing about utterance k+1 before the final of k
    }
    return out;
  }

 private:
  struct State {
    bool started = false;
    bool finished = false;
    uint32_t next_interim_ms = 0;
  };

  StreamingRecognizeResponse Base(uint32_t t_ms) const {
    StreamingRecognizeResponse r;
    r.set_request_id(request_id_);
    r.set_processed_audio_ms(t_ms);
    return r;
  }

  StreamingRecognizeResponse Event(uint32_t t_ms, v1::SpeechEvent::Type type, size_t k,
                                   uint32_t offset_ms, uint32_t detected_ms) const {
    StreamingRecognizeResponse r = Base(t_ms);
    v1::SpeechEvent* e = r.mutable_event();
    e->set_type(type);
    e->set_utterance_index(static_cast<uint32_t>(k));
    e->set_offset_ms(offset_ms);
    e->set_detected_at_ms(detected_ms);
    return r;
  }

  StreamingRecognizeResponse Result(uint32_t t_ms, size_t k, uint32_t until_ms, bool final) const {
    const FakeUtterance& u = options_.script[k];
    StreamingRecognizeResponse r = Base(t_ms);
    v1::StreamingRecognitionResult* result = r.mutable_result();
    result->set_utterance_index(static_cast<uint32_t>(k));
    result->set_is_final(final);
    std::string stable;
    const size_t n = FillWords(u, until_ms, words_, final, result->add_alternatives(), &stable);
    result->set_stable_transcript(stable);
    result->set_stability(n == 0 ? 0.f : final ? 1.f : static_cast<float>(n - 1) / n);
    result->set_start_ms(u.start_ms());
    result->set_end_ms(until_ms);
    result->set_language("en");
    result->mutable_latency()->set_audio_to_result_ms(final ? 600.f : 150.f);
    result->mutable_latency()->set_server_ms(final ? 100.f : 50.f);
    result->mutable_latency()->set_encoder_ms(20.f);
    result->mutable_latency()->set_decoder_ms(30.f);
    result->mutable_latency()->set_batch_size(1);
    return r;
  }

  const FakeRecognizerOptions& options_;
  const bool interim_;
  const bool words_;
  const uint32_t silence_ms_;
  const std::string request_id_;
  std::vector<State> states_;
};

}  // namespace

std::vector<FakeUtterance> RegularScript(int utterances, int words, uint32_t gap_ms) {
  std::vector<FakeUtterance> script;
  uint32_t t = 500;
  int k = 0;
  for (int u = 0; u < utterances; ++u) {
    FakeUtterance utterance;
    for (int w = 0; w < words; ++w, ++k) {
      utterance.words.push_back({absl::StrCat("w", k), t, t + 300});
      t += 400;
    }
    script.push_back(std::move(utterance));
    t += gap_ms;
  }
  return script;
}

std::unique_ptr<FakeRecognizer> FakeRecognizer::Start(const FakeRecognizerOptions& options) {
  std::unique_ptr<FakeRecognizer> fake(new FakeRecognizer(options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(fake.get());
  fake->server_ = builder.BuildAndStart();
  if (fake->server_ == nullptr || port == 0) return nullptr;
  fake->address_ = absl::StrCat(options.listen.substr(0, options.listen.rfind(':')), ":", port);
  fake->SetServing(true);
  return fake;
}

FakeRecognizer::~FakeRecognizer() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
}

void FakeRecognizer::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);
  health->SetServingStatus(kServiceName, serving);
}

v1::StreamingRecognitionConfig FakeRecognizer::last_config() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_config_;
}

grpc::Status FakeRecognizer::StreamingRecognize(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::StreamingRecognizeResponse, v1::StreamingRecognizeRequest>*
        stream) {
  if (options_.max_streams > 0 && active_.fetch_add(1) >= options_.max_streams) {
    active_.fetch_sub(1);
    streams_refused_.fetch_add(1);
    return {grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat("the server's limit of ", options_.max_streams,
                         " concurrent streams is reached; retry later")};
  }
  if (options_.max_streams <= 0) active_.fetch_add(1);
  struct Release {
    std::atomic<int>* active;
    ~Release() { active->fetch_sub(1); }
  } release{&active_};
  streams_opened_.fetch_add(1);

  v1::StreamingRecognizeRequest request;
  if (!stream->Read(&request) || !request.has_config()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "the first message of a stream must be a config"};
  }
  const v1::StreamingRecognitionConfig config = request.config();
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_config_ = config;
  }
  std::unique_ptr<audio::StreamDecoder> decoder;
  if (grpc::Status s = MakeDecoder(config.recognition().audio_format(), &decoder); !s.ok()) {
    return s;
  }
  const std::string request_id = config.request_id().empty()
                                     ? absl::StrCat("fake-", next_id_.fetch_add(1))
                                     : config.request_id();
  StreamingRecognizeResponse started;
  started.set_request_id(request_id);
  *started.mutable_started()->mutable_effective_config() = config;
  v1::StreamingRecognitionConfig* effective = started.mutable_started()->mutable_effective_config();
  effective->set_request_id(request_id);
  effective->set_interim_results(!config.has_interim_results() || config.interim_results());
  if (!effective->endpointing().has_silence_ms()) {
    effective->mutable_endpointing()->set_silence_ms(options_.silence_ms);
  }
  effective->mutable_recognition()->set_model(options_.model);
  started.mutable_started()->mutable_model()->set_name(options_.model);
  started.mutable_started()->mutable_model()->set_backend("cpu");
  if (!stream->Write(started)) return {grpc::StatusCode::CANCELLED, "client went away"};
  if (absl::StartsWith(request_id, "fail:")) {
    return {CodeFromName(request_id.substr(5)), absl::StrCat("failing as asked by ", request_id)};
  }

  Player player(options_, config, request_id);
  std::vector<float> scratch;
  uint32_t t_ms = 0;
  while (stream->Read(&request)) {
    if (request.has_config()) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("a config after the first message (request id ", request_id, ")")};
    }
    if (request.request_case() != v1::StreamingRecognizeRequest::kAudio) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "a message with nothing set"};
    }
    audio_bytes_.fetch_add(static_cast<int64_t>(request.audio().size()));
    scratch.clear();
    absl::Status fed = decoder->Feed(
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(request.audio().data()),
                                  request.audio().size()),
        &scratch);
    if (!fed.ok()) return {grpc::StatusCode::INVALID_ARGUMENT, std::string(fed.message())};
    t_ms = StreamTimeMs(*decoder);
    for (const StreamingRecognizeResponse& r : player.Advance(t_ms, false)) {
      if (!stream->Write(r)) return {grpc::StatusCode::CANCELLED, "client went away"};
    }
    if (options_.fail_code != grpc::StatusCode::OK && t_ms >= options_.fail_after_ms) {
      return {options_.fail_code, absl::StrCat("failing after ", t_ms, " ms as configured")};
    }
  }
  if (context->IsCancelled()) return {grpc::StatusCode::CANCELLED, "cancelled"};
  scratch.clear();
  if (absl::Status s = decoder->Finish(&scratch); !s.ok()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, std::string(s.message())};
  }
  t_ms = StreamTimeMs(*decoder);
  for (const StreamingRecognizeResponse& r : player.Advance(t_ms, true)) {
    if (!stream->Write(r)) return {grpc::StatusCode::CANCELLED, "client went away"};
  }
  return grpc::Status::OK;
}

grpc::Status FakeRecognizer::Recognize(grpc::ServerContext* context,
                                       const v1::RecognizeRequest* request,
                                       v1::RecognizeResponse* response) {
  std::unique_ptr<audio::StreamDecoder> decoder;
  if (grpc::Status s = MakeDecoder(request->config().audio_format(), &decoder); !s.ok()) {
    return s;
  }
  if (request->audio().empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "Recognize needs audio; the request has none"};
  }
  std::vector<float> scratch;
  absl::Status s = decoder->Feed(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(request->audio().data()),
                                request->audio().size()),
      &scratch);
  if (s.ok()) s = decoder->Finish(&scratch);
  if (!s.ok()) return {grpc::StatusCode::INVALID_ARGUMENT, std::string(s.message())};
  const uint32_t duration_ms = StreamTimeMs(*decoder);
  const bool words = options_.send_words && request->config().enable_word_time_offsets();
  for (const FakeUtterance& u : options_.script) {
    if (u.words.empty() || u.start_ms() + options_.min_speech_ms > duration_ms) continue;
    v1::RecognitionResult* result = response->add_results();
    std::string stable;
    FillWords(u, duration_ms, words, true, result->add_alternatives(), &stable);
    result->set_start_ms(u.start_ms());
    result->set_end_ms(std::min(u.end_ms(), duration_ms));
    result->set_end_reason(u.end_ms() + options_.silence_ms <= duration_ms
                               ? v1::UTTERANCE_END_REASON_SILENCE
                               : v1::UTTERANCE_END_REASON_END_OF_AUDIO);
    result->set_language("en");
  }
  response->set_request_id(request->request_id().empty() ? "fake-recognize"
                                                         : request->request_id());
  response->set_audio_duration_ms(duration_ms);
  response->set_processing_ms(12.5f);
  response->set_model(options_.model);
  return grpc::Status::OK;
}

grpc::Status FakeRecognizer::ListModels(grpc::ServerContext* context,
                                        const v1::ListModelsRequest* request,
                                        v1::ListModelsResponse* response) {
  v1::ModelInfo* model = response->add_models();
  model->set_name(options_.model);
  model->set_family("whisper");
  model->add_languages("en");
  model->set_sample_rate_hz(16000);
  model->set_backend("cpu");
  model->set_loaded(true);
  model->set_streaming(true);
  response->set_default_model(options_.model);
  response->set_server_version("fake");
  return grpc::Status::OK;
}

}  // namespace waav::testing
