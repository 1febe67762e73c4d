#include "server/vad_factory.h"

#include "server/energy_vad.h"

namespace waav::server {

absl::StatusOr<std::unique_ptr<streaming::VoiceActivityModel>> CreateVad(
    const ServerConfig& /*config*/, Backend& /*backend*/) {
  return std::unique_ptr<streaming::VoiceActivityModel>(std::make_unique<EnergyVad>());
}

const char* VadName() { return "energy-fallback"; }

}  // namespace waav::server
