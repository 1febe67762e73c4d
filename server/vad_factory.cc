#include "server/vad_factory.h"

#include "engine/runtime/status.h"
#include "engine/streaming/silero_voice_activity.h"
#include "server/energy_vad.h"

namespace waav::server {

absl::StatusOr<std::unique_ptr<streaming::VoiceActivityModel>> CreateVad(const ServerConfig& config,
                                                                         Backend& backend) {
  if (config.vad_model == "energy") {
    return std::unique_ptr<streaming::VoiceActivityModel>(std::make_unique<EnergyVad>());
  }
  ASSIGN_OR_RETURN(auto silero, streaming::SileroVoiceActivity::Load(config.vad_model, backend));
  return std::unique_ptr<streaming::VoiceActivityModel>(std::move(silero));
}

std::string VadName(const ServerConfig& config) {
  return config.vad_model == "energy" ? "energy" : "silero";
}

}  // namespace waav::server
