#include "server/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/metrics/latency_budgets.h"
#include "engine/runtime/status.h"

#ifndef WAAV_DEFAULT_MODEL_DIR
#define WAAV_DEFAULT_MODEL_DIR "models/whisper-tiny.en"
#endif

namespace waav::server {
namespace {

absl::Status IntInRange(const char* key, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(key, " must be in [", lo, ", ", hi, "]; got ", value));
}

absl::Status DoubleInRange(const char* key, double value, double lo, double hi) {
  if (std::isfinite(value) && value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(key, " must be in [", lo, ", ", hi, "]; got ", value));
}

absl::Status CheckAddress(const char* key, const std::string& address) {
  HostPort parsed;
  const absl::Status status = ParseHostPort(address, &parsed);
  if (status.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", status.message()));
}

}  // namespace

std::string ServerConfig::DefaultModelDir() { return WAAV_DEFAULT_MODEL_DIR; }
std::string ServerConfig::DefaultVadModel() { return WAAV_DEFAULT_VAD_MODEL; }

absl::Status ParseHostPort(const std::string& address, HostPort* out) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not HOST:PORT (for example 127.0.0.1:50051)"));
  }
  std::string host = address.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return absl::InvalidArgumentError(
          absl::StrCat("'", address, "': an IPv6 host is written in brackets, [::1]:50051"));
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "': write an IPv6 host in brackets, [::1]:50051"));
  }
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "': the port must be a number in [0, 65535]"));
  }
  out->host = std::move(host);
  out->port = port;
  return absl::OkStatus();
}

std::string EffectiveModelName(const ServerConfig& config) {
  if (!config.model_name.empty()) return config.model_name;
  std::filesystem::path dir(config.model_dir);
  if (!dir.has_filename()) dir = dir.parent_path();  // "models/whisper-tiny.en/"
  return dir.filename().string();
}

int EffectiveVadThreads(const ServerConfig& config, int hardware_threads) {
  if (config.vad_threads > 0) return config.vad_threads;
  if (hardware_threads < 8) return 1;
  return std::min(4, hardware_threads / 8 + 1);
}

int EffectivePartialWindowMs(const ServerConfig& config, bool whisper_on_cpu) {
  if (config.partial_window_ms >= 0) return config.partial_window_ms;
  return whisper_on_cpu ? 5000 : 0;
}

absl::Status ServerConfig::Validate() const {
  RETURN_IF_ERROR(CheckAddress("listen", listen));
  if (!metrics_listen.empty()) RETURN_IF_ERROR(CheckAddress("metrics_listen", metrics_listen));
  if (model_dir.empty()) return absl::InvalidArgumentError("model_dir must be set");
  if (vad_model.empty()) {
    return absl::InvalidArgumentError("vad_model must be set (a Silero ONNX file, or \"energy\")");
  }
  if (EffectiveModelName(*this).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model_name is empty and model_dir '", model_dir, "' names no folder"));
  }
  if (backend.empty()) return absl::InvalidArgumentError("backend must be set (auto, cpu, ...)");
  RETURN_IF_ERROR(IntInRange("threads", threads, 0, 1024));
  RETURN_IF_ERROR(IntInRange("gpu_device", gpu_device, 0, 1023));
  RETURN_IF_ERROR(IntInRange("gpu_l2_encoder_mb", gpu_l2_encoder_mb, 0, 1024));
  RETURN_IF_ERROR(IntInRange("offline_workers", offline_workers, 1, 64));
  RETURN_IF_ERROR(IntInRange("max_queued_recognize", max_queued_recognize, 0, 10000));
  RETURN_IF_ERROR(IntInRange("max_streams", max_streams, 1, 100000));
  RETURN_IF_ERROR(IntInRange("max_message_bytes", max_message_bytes, 1024, int64_t{1} << 30));
  RETURN_IF_ERROR(DoubleInRange("max_stream_duration_s", max_stream_duration_s, 1, 86400));
  RETURN_IF_ERROR(DoubleInRange("idle_timeout_s", idle_timeout_s, 0.1, 3600));
  RETURN_IF_ERROR(IntInRange("ingest_ring_slots", ingest_ring_slots, 16, 1 << 22));
  RETURN_IF_ERROR(IntInRange("max_batch", max_batch, 1, 256));
  if (partial_window_ms != 0 && partial_window_ms != -1) {
    RETURN_IF_ERROR(IntInRange("partial_window_ms", partial_window_ms, 1000, 30000));
  }
  if (restart_stop_words != 0) {
    RETURN_IF_ERROR(IntInRange("restart_stop_words", restart_stop_words, 2, 16));
  }
  RETURN_IF_ERROR(IntInRange("vad_threads", vad_threads, 0, 16));
  RETURN_IF_ERROR(DoubleInRange("shutdown_grace_s", shutdown_grace_s, 0, 3600));
  RETURN_IF_ERROR(IntInRange("endpointing.silence_ms", endpointing.silence_ms, 100, 10000));
  RETURN_IF_ERROR(
      IntInRange("endpointing.max_utterance_ms", endpointing.max_utterance_ms, 1000, 30000));
  if (!(endpointing.vad_threshold > 0 && endpointing.vad_threshold < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpointing.vad_threshold must be strictly between 0 and 1; got ",
                     endpointing.vad_threshold));
  }
  RETURN_IF_ERROR(IntInRange("endpointing.min_speech_ms", endpointing.min_speech_ms, 0, 5000));
  RETURN_IF_ERROR(
      IntInRange("endpointing.cold_start_pad_ms", endpointing.cold_start_pad_ms, 0, 1000));
  RETURN_IF_ERROR(IntInRange("partial_interval_ms", partial_interval_ms, 100, 10000));
  RETURN_IF_ERROR(IntInRange("pause_partial_ms", pause_partial_ms, 0, 10000));
  RETURN_IF_ERROR(IntInRange("gap_partial_db", gap_partial_db, 0, 60));
  RETURN_IF_ERROR(IntInRange("start_partial_ms", start_partial_ms, -1, 10000));
  RETURN_IF_ERROR(IntInRange("gap_partial_min_ms", gap_partial_min_ms, 0, 10000));
  RETURN_IF_ERROR(IntInRange("commit_min_audio_ms", commit_min_audio_ms, 0, 30000));
  metrics::LatencyBudgets budgets;
  if (absl::Status s = budgets.ApplyOverrides(latency_budgets); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("latency_budgets: ", s.message()));
  }
  if (absl::Status s = budgets.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("latency_budgets: ", s.message()));
  }
  static constexpr const char* kLevels[] = {"trace", "debug",    "info", "warn",
                                            "error", "critical", "off"};
  for (const char* level : kLevels) {
    if (log_level == level) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "log_level must be one of ", absl::StrJoin(kLevels, ", "), "; got '", log_level, "'"));
}

}  // namespace waav::server
