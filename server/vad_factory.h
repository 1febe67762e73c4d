// The one place waavd chooses its voice-activity model.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"
#include "engine/streaming/voice_activity.h"
#include "server/config.h"

namespace waav::server {

// A VAD for one consumer (the streaming engine's frontend worker, or one offline worker): the
// models are not shared between threads. Today this is EnergyVad, a documented fallback
// (server/energy_vad.h); when Silero VAD (engine/models/vad) is merged it loads Silero onto
// `backend` here, and nothing else in the server changes.
absl::StatusOr<std::unique_ptr<streaming::VoiceActivityModel>> CreateVad(const ServerConfig& config,
                                                                         Backend& backend);

// Which model CreateVad returns, for logs and ListModels ("energy-fallback", later "silero").
const char* VadName();

}  // namespace waav::server
