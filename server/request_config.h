// Checking and resolving what a client asks for: a RecognitionConfig, a streaming config, a
// request id. Every error is an absl::Status with the code proto/README.md gives it and a
// message that names the field, the value received and what is allowed.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/audio/stream_decoder.h"
#include "engine/streaming/stream_types.h"
#include "server/config.h"
#include "waav/v1/recognizer.pb.h"

namespace waav::server {

// The model a server offers (one, for now), as ListModels describes it.
struct ModelDescription {
  std::string name;  // "whisper-tiny.en"
  std::string family = "whisper";
  std::vector<std::string> languages;  // {"en"}
  int sample_rate_hz = 16000;
  std::string backend;  // "cpu"
  bool streaming = true;

  v1::ModelInfo ToProto(bool loaded) const;
};

// The languages a model folder's name implies: "*.en" models are English-only. The engine
// decodes English only so far, so multilingual models also list {"en"} until it detects or
// forces other languages.
std::vector<std::string> LanguagesForModel(const std::string& model_name);

// AudioFormat -> the decoder's spec. INVALID_ARGUMENT for a missing format, an UNSPECIFIED or
// unknown encoding, a raw encoding without a rate in 8000..192000, more than 8 channels, a
// container rate outside that range.
absl::StatusOr<audio::AudioFormatSpec> ResolveAudioFormat(const v1::RecognitionConfig& config);

// The request id to use: the client's, checked (up to 128 printable ASCII characters), or a
// fresh random one when empty.
absl::StatusOr<std::string> ResolveRequestId(const std::string& requested);

// What a stream runs with, and the effective config sent back in StreamStarted.
struct StreamSetup {
  audio::AudioFormatSpec format;
  streaming::StreamOptions options;
  v1::StreamingRecognitionConfig effective;  // every default filled in
  std::string request_id;
  std::string language;  // "en"
};

// Checks `config` against the model and the server's defaults and fills in every default.
// NOT_FOUND for an unknown model (the message lists the known ones); INVALID_ARGUMENT for the
// rest (see proto/README.md's table).
absl::StatusOr<StreamSetup> ResolveStreamingConfig(const v1::StreamingRecognitionConfig& config,
                                                   const ServerConfig& server,
                                                   const ModelDescription& model);

// The parts of a Recognize request that streaming shares: format, model, language, options,
// endpointing ranges. Returns the resolved language.
struct OfflineSetup {
  audio::AudioFormatSpec format;
  std::string language;
  std::string request_id;
  bool word_time_offsets = false;
};
absl::StatusOr<OfflineSetup> ResolveRecognizeRequest(const v1::RecognizeRequest& request,
                                                     const ServerConfig& server,
                                                     const ModelDescription& model);

}  // namespace waav::server
