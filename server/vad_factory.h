// The one place waavd chooses its voice-activity model.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"
#include "engine/streaming/voice_activity.h"
#include "server/config.h"

namespace waav::server {

// The VAD for the streaming engine's frontend worker: Silero VAD loaded from
// config.vad_model onto `backend` (which must be used by that worker's thread only; the CPU
// backend implements the LSTM and activation ops Silero needs), or the energy detector when
// config.vad_model is "energy".
absl::StatusOr<std::unique_ptr<streaming::VoiceActivityModel>> CreateVad(const ServerConfig& config,
                                                                         Backend& backend);

// Which model CreateVad returns, for logs and ListModels: "silero" or "energy".
std::string VadName(const ServerConfig& config);

}  // namespace waav::server
