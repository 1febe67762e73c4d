#include "server/request_config.h"

#include <algorithm>
#include <cmath>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/runtime/status.h"

namespace waav::server {
namespace {

constexpr int kMaxRequestIdChars = 128;
constexpr size_t kMaxInitialPromptBytes = 1024;
constexpr uint32_t kMaxAlternatives = 10;
// The engine decodes at most one 30 s Whisper window per utterance; longer requests are applied
// as this (and the effective config says so).
constexpr uint32_t kEngineMaxUtteranceMs = 30000;

absl::Status OutOfRange(absl::string_view field, int64_t value, int64_t lo, int64_t hi) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be in [", lo, ", ", hi, "]; got ", value));
}

absl::Status ResolveEndpointing(const v1::EndpointingConfig& in, const EndpointingDefaults& d,
                                streaming::EndpointConfig* engine,
                                v1::EndpointingConfig* effective) {
  const uint32_t silence_ms = in.has_silence_ms() ? in.silence_ms() : d.silence_ms;
  if (silence_ms < 100 || silence_ms > 10000) {
    return OutOfRange("endpointing.silence_ms", silence_ms, 100, 10000);
  }
  const uint32_t max_utterance_ms =
      in.has_max_utterance_ms() ? in.max_utterance_ms() : d.max_utterance_ms;
  if (max_utterance_ms < 1000 || max_utterance_ms > 120000) {
    return OutOfRange("endpointing.max_utterance_ms", max_utterance_ms, 1000, 120000);
  }
  const float threshold =
      in.has_vad_threshold() ? in.vad_threshold() : static_cast<float>(d.vad_threshold);
  if (!(threshold > 0.0f && threshold < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "endpointing.vad_threshold must be strictly between 0 and 1; got ", threshold));
  }
  const uint32_t min_speech_ms = in.has_min_speech_ms() ? in.min_speech_ms() : d.min_speech_ms;
  if (min_speech_ms > 5000) return OutOfRange("endpointing.min_speech_ms", min_speech_ms, 0, 5000);

  engine->silence_ms = static_cast<int>(silence_ms);
  engine->max_utterance_ms = static_cast<int>(std::min(max_utterance_ms, kEngineMaxUtteranceMs));
  engine->threshold = threshold;
  // Silence is below threshold - 0.15, and never below 0.01 (proto: EndpointingConfig).
  const float off = std::max(threshold - 0.15f, 0.01f);
  engine->hysteresis = std::max(0.0f, threshold - off);
  engine->min_speech_ms = static_cast<int>(min_speech_ms);
  engine->cold_start_pad_ms = d.cold_start_pad_ms;

  effective->set_silence_ms(silence_ms);
  effective->set_max_utterance_ms(static_cast<uint32_t>(engine->max_utterance_ms));
  effective->set_vad_threshold(threshold);
  effective->set_min_speech_ms(min_speech_ms);
  return absl::OkStatus();
}

// Model, language and output options, shared by streaming and Recognize.
absl::StatusOr<std::string> ResolveModelAndLanguage(const v1::RecognitionConfig& config,
                                                    const ModelDescription& model) {
  if (!config.model().empty() && config.model() != model.name) {
    return absl::NotFoundError(absl::StrCat("model '", config.model(),
                                            "' is not known to this server; it has: ", model.name));
  }
  std::string language = model.languages.empty() ? "en" : model.languages.front();
  if (!config.language().empty()) {
    const std::string& tag = config.language();
    const size_t end = tag.find_first_of("-_");
    language = absl::AsciiStrToLower(tag.substr(0, end));
    if (std::find(model.languages.begin(), model.languages.end(), language) ==
        model.languages.end()) {
      return absl::InvalidArgumentError(absl::StrCat("language '", tag, "' is not one model ",
                                                     model.name, " transcribes (",
                                                     absl::StrJoin(model.languages, ", "), ")"));
    }
  }
  if (config.max_alternatives() > kMaxAlternatives) {
    return OutOfRange("max_alternatives", config.max_alternatives(), 0, kMaxAlternatives);
  }
  if (config.initial_prompt().size() > kMaxInitialPromptBytes) {
    return absl::InvalidArgumentError(absl::StrCat("initial_prompt is ",
                                                   config.initial_prompt().size(),
                                                   " bytes; at most ", kMaxInitialPromptBytes));
  }
  return language;
}

}  // namespace

v1::ModelInfo ModelDescription::ToProto(bool loaded) const {
  v1::ModelInfo info;
  info.set_name(name);
  info.set_family(family);
  for (const std::string& language : languages) info.add_languages(language);
  info.set_sample_rate_hz(static_cast<uint32_t>(sample_rate_hz));
  info.set_backend(backend);
  info.set_loaded(loaded);
  info.set_streaming(streaming);
  return info;
}

std::vector<std::string> LanguagesForModel(const std::string& /*model_name*/) { return {"en"}; }

absl::StatusOr<audio::AudioFormatSpec> ResolveAudioFormat(const v1::RecognitionConfig& config) {
  if (!config.has_audio_format()) {
    return absl::InvalidArgumentError(
        "audio_format is missing: set its encoding (and sample_rate_hz for raw encodings)");
  }
  const v1::AudioFormat& format = config.audio_format();
  const int encoding = static_cast<int>(format.encoding());
  if (encoding == v1::AUDIO_ENCODING_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "audio_format.encoding is AUDIO_ENCODING_UNSPECIFIED; use LINEAR16, FLOAT32, MULAW, ALAW, "
        "FLAC or OGG_OPUS");
  }
  if (!v1::AudioEncoding_IsValid(encoding) ||
      encoding > static_cast<int>(audio::AudioEncoding::kOggOpus)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audio_format.encoding ", encoding,
        " is not an encoding this server knows; use LINEAR16, FLOAT32, MULAW, ALAW, FLAC or "
        "OGG_OPUS"));
  }
  audio::AudioFormatSpec spec;
  spec.encoding = static_cast<audio::AudioEncoding>(encoding);
  const bool raw = audio::IsRawEncoding(spec.encoding);
  const uint32_t rate = format.sample_rate_hz();
  if ((raw || rate != 0) &&
      (rate < audio::kMinInputSampleRateHz || rate > audio::kMaxInputSampleRateHz)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audio_format.sample_rate_hz ", rate, " is ", raw && rate == 0 ? "missing" : "out of range",
        " for ", audio::AudioEncodingName(spec.encoding), ": it must be in [",
        audio::kMinInputSampleRateHz, ", ", audio::kMaxInputSampleRateHz, "]",
        raw ? "" : " or 0 (taken from the stream header)"));
  }
  if (format.channels() > static_cast<uint32_t>(audio::kMaxInputChannels)) {
    return OutOfRange("audio_format.channels", format.channels(), 0, audio::kMaxInputChannels);
  }
  spec.sample_rate_hz = static_cast<int>(rate);
  spec.channels = static_cast<int>(format.channels());
  return spec;
}

absl::StatusOr<std::string> ResolveRequestId(const std::string& requested) {
  if (requested.empty()) {
    thread_local absl::BitGen gen;
    return absl::StrFormat("%016x", absl::Uniform<uint64_t>(gen));
  }
  if (requested.size() > kMaxRequestIdChars) {
    return absl::InvalidArgumentError(absl::StrCat("request_id has ", requested.size(),
                                                   " characters; at most ", kMaxRequestIdChars));
  }
  for (size_t i = 0; i < requested.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(requested[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "request_id has byte 0x%02x at position %d; only printable ASCII (0x20-0x7E) is allowed",
          c, i));
    }
  }
  return requested;
}

absl::StatusOr<StreamSetup> ResolveStreamingConfig(const v1::StreamingRecognitionConfig& config,
                                                   const ServerConfig& server,
                                                   const ModelDescription& model) {
  StreamSetup setup;
  ASSIGN_OR_RETURN(setup.request_id, ResolveRequestId(config.request_id()));
  if (!config.has_recognition()) {
    return absl::InvalidArgumentError(
        "config.recognition is missing: it carries the audio format (required)");
  }
  const v1::RecognitionConfig& recognition = config.recognition();
  ASSIGN_OR_RETURN(setup.format, ResolveAudioFormat(recognition));
  ASSIGN_OR_RETURN(setup.language, ResolveModelAndLanguage(recognition, model));

  setup.effective = config;
  v1::RecognitionConfig& effective = *setup.effective.mutable_recognition();
  RETURN_IF_ERROR(ResolveEndpointing(config.endpointing(), server.endpointing,
                                     &setup.options.endpoint,
                                     setup.effective.mutable_endpointing()));
  effective.set_model(model.name);
  effective.set_language(setup.language);
  effective.set_max_alternatives(std::max<uint32_t>(1, recognition.max_alternatives()));
  if (audio::IsRawEncoding(setup.format.encoding) && setup.format.channels == 0) {
    effective.mutable_audio_format()->set_channels(1);
  }
  setup.effective.set_interim_results(!config.has_interim_results() || config.interim_results());
  setup.effective.set_request_id(setup.request_id);

  setup.options.interim_results = setup.effective.interim_results();
  setup.options.single_utterance = config.single_utterance();
  setup.options.partial_interval_ms = server.partial_interval_ms;
  setup.options.pause_partial_ms = server.pause_partial_ms;
  setup.options.gap_partial_db = server.gap_partial_db;
  setup.options.start_partial_ms = server.start_partial_ms;
  setup.options.gap_partial_min_ms = server.gap_partial_min_ms;
  setup.options.commit_min_audio_ms = server.commit_min_audio_ms;
  setup.options.initial_prompt = recognition.initial_prompt();
  setup.options.word_time_offsets = recognition.enable_word_time_offsets();
  return setup;
}

absl::StatusOr<OfflineSetup> ResolveRecognizeRequest(const v1::RecognizeRequest& request,
                                                     const ServerConfig& server,
                                                     const ModelDescription& model) {
  OfflineSetup setup;
  ASSIGN_OR_RETURN(setup.request_id, ResolveRequestId(request.request_id()));
  if (!request.has_config()) {
    return absl::InvalidArgumentError("config is missing: it carries the audio format (required)");
  }
  ASSIGN_OR_RETURN(setup.format, ResolveAudioFormat(request.config()));
  ASSIGN_OR_RETURN(setup.language, ResolveModelAndLanguage(request.config(), model));
  streaming::EndpointConfig unused;
  v1::EndpointingConfig effective;
  RETURN_IF_ERROR(
      ResolveEndpointing(request.endpointing(), server.endpointing, &unused, &effective));
  if (request.audio().empty()) {
    return absl::InvalidArgumentError("audio is empty: send the whole recording in `audio`");
  }
  setup.word_time_offsets = request.config().enable_word_time_offsets();
  return setup;
}

}  // namespace waav::server
