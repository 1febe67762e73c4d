#include "server/config_sources.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/runtime/status.h"
#include "yaml-cpp/yaml.h"

extern char** environ;

namespace waav::server {
namespace {

constexpr int64_t kMaxConfigFileBytes = int64_t{1} << 20;

absl::Status ParseValue(const std::string& text, std::string* out) {
  *out = text;
  return absl::OkStatus();
}
absl::Status ParseValue(const std::string& text, int* out) {
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), out)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("expected an integer, got '", text, "'"));
}
absl::Status ParseValue(const std::string& text, int64_t* out) {
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), out)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("expected an integer, got '", text, "'"));
}
absl::Status ParseValue(const std::string& text, double* out) {
  if (absl::SimpleAtod(absl::StripAsciiWhitespace(text), out) && std::isfinite(*out)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", text, "'"));
}

std::string FormatValue(const std::string& v) { return v; }
std::string FormatValue(int v) { return absl::StrCat(v); }
std::string FormatValue(int64_t v) { return absl::StrCat(v); }
std::string FormatValue(double v) { return absl::StrCat(v); }

// A field whose value is reached by `access(config)` (a generic lambda returning a reference,
// so the same accessor serves the const getter and the setter).
template <typename Access>
ConfigField Field(std::string key, std::string help, Access access) {
  ConfigField field;
  field.key = std::move(key);
  field.help = std::move(help);
  field.set = [access](ServerConfig& config, const std::string& text) {
    auto& target = access(config);
    std::remove_reference_t<decltype(target)> value{};
    RETURN_IF_ERROR(ParseValue(text, &value));
    target = value;
    return absl::OkStatus();
  };
  field.get = [access](const ServerConfig& config) { return FormatValue(access(config)); };
  field.is_string =
      std::is_same_v<std::decay_t<decltype(access(std::declval<ServerConfig&>()))>, std::string>;
  return field;
}

std::vector<ConfigField> MakeFields() {
  std::vector<ConfigField> f;
  f.push_back(Field(
      "listen", "gRPC API address HOST:PORT; port 0 binds a free port",
      [](auto& c) -> auto& { return c.listen; }));
  f.push_back(Field(
      "metrics_listen", "admin HTTP address HOST:PORT for /metrics, /healthz, /readyz; empty: off",
      [](auto& c) -> auto& { return c.metrics_listen; }));
  f.push_back(Field(
      "port_file", "write the bound addresses here ('grpc HOST:PORT', 'metrics HOST:PORT')",
      [](auto& c) -> auto& { return c.port_file; }));
  f.push_back(Field(
      "model_dir", "Whisper model folder (model.bin, tokenizer.json)",
      [](auto& c) -> auto& { return c.model_dir; }));
  f.push_back(Field(
      "vad_model", "Silero VAD ONNX file, or 'energy' for the energy detector (no model)",
      [](auto& c) -> auto& { return c.vad_model; }));
  f.push_back(Field(
      "model_name", "model name for clients; empty: the folder's name",
      [](auto& c) -> auto& { return c.model_name; }));
  f.push_back(Field(
      "backend", "compute backend: auto, cpu, cuda, hip, vulkan",
      [](auto& c) -> auto& { return c.backend; }));
  f.push_back(Field(
      "threads", "CPU threads per backend instance; 0: all cores",
      [](auto& c) -> auto& { return c.threads; }));
  f.push_back(Field(
      "gpu_device", "GPU ordinal for cuda and hip (and auto, which falls back to the CPU)",
      [](auto& c) -> auto& { return c.gpu_device; }));
  f.push_back(Field(
      "gpu_l2_encoder_mb",
      "MiB of GPU L2 kept for the encoder output decoder steps reread; 0: none",
      [](auto& c) -> auto& { return c.gpu_l2_encoder_mb; }));
  f.push_back(Field(
      "offline_workers", "workers for whole-file Recognize, each with its own model copy",
      [](auto& c) -> auto& { return c.offline_workers; }));
  f.push_back(Field(
      "max_queued_recognize",
      "Recognize requests that may wait for a worker; more: RESOURCE_EXHAUSTED",
      [](auto& c) -> auto& { return c.max_queued_recognize; }));
  f.push_back(Field(
      "max_streams", "concurrent streams; one more: RESOURCE_EXHAUSTED at once",
      [](auto& c) -> auto& { return c.max_streams; }));
  f.push_back(Field(
      "max_message_bytes", "largest request message accepted; larger: RESOURCE_EXHAUSTED",
      [](auto& c) -> auto& { return c.max_message_bytes; }));
  f.push_back(Field(
      "max_stream_duration_s",
      "longest stream (audio or wall time); then finals and DEADLINE_EXCEEDED",
      [](auto& c) -> auto& { return c.max_stream_duration_s; }));
  f.push_back(Field(
      "idle_timeout_s", "no message either way for this long: DEADLINE_EXCEEDED",
      [](auto& c) -> auto& { return c.idle_timeout_s; }));
  f.push_back(Field(
      "ingest_ring_slots", "100 ms slots of the engine's ingest ring (shared by all streams)",
      [](auto& c) -> auto& { return c.ingest_ring_slots; }));
  f.push_back(Field(
      "max_batch", "most utterance windows (of different streams) decoded as one batch",
      [](auto& c) -> auto& { return c.max_batch; }));
  f.push_back(Field(
      "partial_window_ms",
      "interim results encode their audio + 2 s, rounded up to this (ms; 0: 30 s; -1: auto)",
      [](auto& c) -> auto& { return c.partial_window_ms; }));
  f.push_back(Field(
      "restart_stop_words",
      "an interim result's decoding stops at a restart of its words this long (0: never)",
      [](auto& c) -> auto& { return c.restart_stop_words; }));
  f.push_back(Field(
      "vad_threads", "CPU threads of the voice-activity model (0: auto)",
      [](auto& c) -> auto& { return c.vad_threads; }));
  f.push_back(Field(
      "shutdown_grace_s", "after SIGTERM: time in-flight requests get before they are closed",
      [](auto& c) -> auto& { return c.shutdown_grace_s; }));
  f.push_back(Field(
      "endpointing.silence_ms", "default: silence (ms) that ends an utterance",
      [](auto& c) -> auto& { return c.endpointing.silence_ms; }));
  f.push_back(Field(
      "endpointing.max_utterance_ms", "default: longest utterance (ms)",
      [](auto& c) -> auto& { return c.endpointing.max_utterance_ms; }));
  f.push_back(Field(
      "endpointing.vad_threshold", "default: speech probability threshold",
      [](auto& c) -> auto& { return c.endpointing.vad_threshold; }));
  f.push_back(Field(
      "endpointing.min_speech_ms", "default: shortest speech (ms) that counts",
      [](auto& c) -> auto& { return c.endpointing.min_speech_ms; }));
  f.push_back(Field(
      "endpointing.cold_start_pad_ms",
      "audio (ms) a stream's first utterance, or one after 5 s of none, keeps before its start",
      [](auto& c) -> auto& { return c.endpointing.cold_start_pad_ms; }));
  f.push_back(Field(
      "partial_interval_ms", "speech (ms) between two interim results",
      [](auto& c) -> auto& { return c.partial_interval_ms; }));
  f.push_back(Field(
      "pause_partial_ms", "silence (ms) after speech that sends an interim result at once; 0: off",
      [](auto& c) -> auto& { return c.pause_partial_ms; }));
  f.push_back(Field(
      "start_partial_ms",
      "delay (ms) after an utterance's start is detected of its first interim result; -1: none",
      [](auto& c) -> auto& { return c.start_partial_ms; }));
  f.push_back(Field(
      "gap_partial_db",
      "a level drop (dB below the recent peak) between words that sends an interim result at "
      "once; 0: off",
      [](auto& c) -> auto& { return c.gap_partial_db; }));
  f.push_back(Field(
      "gap_partial_min_ms", "speech (ms) since the last interim result before a gap sends one",
      [](auto& c) -> auto& { return c.gap_partial_min_ms; }));
  f.push_back(Field(
      "commit_min_audio_ms",
      "utterance audio (ms) an interim result's window needs before it commits words; 0: any",
      [](auto& c) -> auto& { return c.commit_min_audio_ms; }));
  ConfigField budgets = Field(
      "latency_budgets", "stage budget overrides 'name=ms,...' (YAML: also a map)",
      [](auto& c) -> auto& { return c.latency_budgets; });
  budgets.accepts_map = true;
  f.push_back(std::move(budgets));
  f.push_back(Field(
      "log_level", "trace, debug, info, warn, error, critical, off",
      [](auto& c) -> auto& { return c.log_level; }));
  return f;
}

const ConfigField* FindField(const std::string& key) {
  for (const ConfigField& field : ConfigFields()) {
    if (field.key == key) return &field;
  }
  return nullptr;
}

bool IsSectionPrefix(const std::string& key) {
  const std::string prefix = key + ".";
  for (const ConfigField& field : ConfigFields()) {
    if (field.key.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

std::string KnownKeys() {
  std::vector<std::string> keys;
  for (const ConfigField& field : ConfigFields()) keys.push_back(field.key);
  return absl::StrJoin(keys, ", ");
}

class YamlWalker {
 public:
  YamlWalker(const std::string& source, ServerConfig* config) : source_(source), config_(config) {}

  absl::Status Walk(const YAML::Node& map, const std::string& prefix) {
    for (const auto& entry : map) {
      const YAML::Node& key_node = entry.first;
      const YAML::Node& value = entry.second;
      if (!key_node.IsScalar()) return Error(key_node, "a key must be a plain name");
      const std::string key =
          prefix.empty() ? key_node.Scalar() : absl::StrCat(prefix, ".", key_node.Scalar());
      if (!seen_.insert(key).second)
        return Error(key_node, absl::StrCat("'", key, "' is set twice"));
      const ConfigField* field = FindField(key);
      if (value.IsMap()) {
        if (field != nullptr && field->accepts_map) {
          RETURN_IF_ERROR(SetFromMap(*field, value));
        } else if (field == nullptr && IsSectionPrefix(key)) {
          RETURN_IF_ERROR(Walk(value, key));
        } else if (field != nullptr) {
          return Error(value, absl::StrCat("'", key, "' takes a single value, not a map"));
        } else {
          return UnknownKey(key_node, key);
        }
        continue;
      }
      if (field == nullptr) {
        if (IsSectionPrefix(key)) {
          return Error(value, absl::StrCat("'", key, "' is a section: give it a map of settings"));
        }
        return UnknownKey(key_node, key);
      }
      if (value.IsSequence()) {
        return Error(value, absl::StrCat("'", key, "' takes a single value, not a list"));
      }
      if (value.IsNull() || !value.IsScalar()) {
        return Error(value, absl::StrCat("'", key, "' has no value"));
      }
      if (absl::Status s = field->set(*config_, value.Scalar()); !s.ok()) {
        return Error(value, absl::StrCat("'", key, "': ", s.message()));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status SetFromMap(const ConfigField& field, const YAML::Node& map) {
    std::vector<std::string> items;
    for (const auto& entry : map) {
      if (!entry.first.IsScalar() || !entry.second.IsScalar()) {
        return Error(entry.first, absl::StrCat("'", field.key, "' entries are name: number"));
      }
      items.push_back(absl::StrCat(entry.first.Scalar(), "=", entry.second.Scalar()));
    }
    if (absl::Status s = field.set(*config_, absl::StrJoin(items, ",")); !s.ok()) {
      return Error(map, absl::StrCat("'", field.key, "': ", s.message()));
    }
    return absl::OkStatus();
  }

  absl::Status UnknownKey(const YAML::Node& node, const std::string& key) {
    return Error(node, absl::StrCat("unknown key '", key, "' (known keys: ", KnownKeys(), ")"));
  }

  absl::Status Error(const YAML::Node& node, const std::string& what) const {
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) return absl::InvalidArgumentError(absl::StrCat(source_, ": ", what));
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ":", mark.line + 1, ":", mark.column + 1, ": ", what));
  }

  const std::string& source_;
  ServerConfig* config_;
  std::set<std::string> seen_;
};

}  // namespace

const std::vector<ConfigField>& ConfigFields() {
  static const std::vector<ConfigField>* const fields = new std::vector<ConfigField>(MakeFields());
  return *fields;
}

std::string EnvVarName(const std::string& key) {
  std::string name = "WAAV_" + absl::AsciiStrToUpper(key);
  for (char& c : name) {
    if (c == '.') c = '_';
  }
  return name;
}

std::string FlagName(const std::string& key) {
  std::string name = key;
  for (char& c : name) {
    if (c == '.' || c == '_') c = '-';
  }
  return name;
}

absl::Status ApplyYaml(const std::string& yaml_text, const std::string& source_name,
                       ServerConfig* config) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": not valid YAML: ", e.msg));
  }
  if (root.IsNull()) return absl::OkStatus();  // an empty file changes nothing
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": the top level must be a map of settings (key: value)"));
  }
  // A copy: a failing file must not leave the configuration half applied.
  ServerConfig updated = *config;
  try {
    RETURN_IF_ERROR(YamlWalker(source_name, &updated).Walk(root, ""));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ":", e.mark.line + 1, ": ", e.msg));
  }
  *config = std::move(updated);
  return absl::OkStatus();
}

absl::Status ApplyYamlFile(const std::string& path, ServerConfig* config) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat("config file ", path, " does not exist"));
  }
  const auto size = std::filesystem::file_size(path, error);
  if (error || static_cast<int64_t>(size) > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " is larger than ",
                                                   kMaxConfigFileBytes, " bytes: not a config"));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  return ApplyYaml(text.str(), path, config);
}

std::map<std::string, std::string> EnvironmentFromProcess() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string item(*entry);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || item.compare(0, 5, "WAAV_") != 0) continue;
    env.emplace(item.substr(0, eq), item.substr(eq + 1));
  }
  return env;
}

absl::Status ApplyEnvironment(const std::map<std::string, std::string>& env, ServerConfig* config) {
  ServerConfig updated = *config;
  for (const ConfigField& field : ConfigFields()) {
    const std::string name = EnvVarName(field.key);
    auto it = env.find(name);
    if (it == env.end()) continue;
    if (absl::Status s = field.set(updated, it->second); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable ", name, ": ", s.message()));
    }
  }
  *config = std::move(updated);
  return absl::OkStatus();
}

std::string ConfigToYaml(const ServerConfig& config) {
  std::string out =
      "# waavd configuration (waavd --print-config). Every key is optional; docs/server.md.\n";
  std::string open_section;
  for (const ConfigField& field : ConfigFields()) {
    const size_t dot = field.key.find('.');
    const std::string section = dot == std::string::npos ? "" : field.key.substr(0, dot);
    if (section != open_section) {
      if (!section.empty()) absl::StrAppend(&out, section, ":\n");
      open_section = section;
    }
    const std::string indent = section.empty() ? "" : "  ";
    const std::string name = dot == std::string::npos ? field.key : field.key.substr(dot + 1);
    std::string value = field.get(config);
    if (field.is_string) {
      std::string quoted = "\"";
      for (char c : value) {
        if (c == '"' || c == '\\') quoted += '\\';
        quoted += c;
      }
      value = quoted + "\"";
    }
    absl::StrAppend(&out, indent, "# ", field.help, "\n", indent, name, ": ", value, "\n");
  }
  return out;
}

CommandLine::CommandLine(CLI::App* app) {
  app->add_option("--config", config_path_,
                  "YAML file of settings (keys as below, without the dashes; env WAAV_CONFIG). "
                  "Precedence: defaults < file < WAAV_* environment < flags");
  app->add_flag("--print-config", print_config_,
                "print the effective configuration as YAML and exit");
  const ServerConfig defaults;
  for (const ConfigField& field : ConfigFields()) {
    std::string& value = flag_values_[field.key];
    const std::string default_text = field.get(defaults);
    CLI::Option* option = app->add_option(
        "--" + FlagName(field.key), value,
        absl::StrCat(field.help, " [env ", EnvVarName(field.key),
                     "; default: ", default_text.empty() ? "\"\"" : default_text, "]"));
    option->type_name("VALUE");
    options_[field.key] = option;
  }
}

absl::StatusOr<ServerConfig> CommandLine::Resolve(
    const std::map<std::string, std::string>& env) const {
  ServerConfig config;
  std::string path = config_path_;
  if (path.empty()) {
    auto it = env.find("WAAV_CONFIG");
    if (it != env.end()) path = it->second;
  }
  if (!path.empty()) RETURN_IF_ERROR(ApplyYamlFile(path, &config));
  RETURN_IF_ERROR(ApplyEnvironment(env, &config));
  for (const ConfigField& field : ConfigFields()) {
    if (options_.at(field.key)->count() == 0) continue;
    if (absl::Status s = field.set(config, flag_values_.at(field.key)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", FlagName(field.key), ": ", s.message()));
    }
  }
  RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace waav::server
