// Where ServerConfig's values come from: one table of settings (ConfigFields) drives the YAML
// loader, the environment, the command-line flags, --print-config and the reference in
// docs/server.md, so a setting cannot exist in one and be missing from another.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/config.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace waav::server {

// One setting. `key` is its YAML name, dotted for a nested map ("endpointing.silence_ms").
struct ConfigField {
  std::string key;
  std::string help;  // one line, without the default (Describe adds it)
  // Parses `text` into `config`; InvalidArgument naming the expected form otherwise.
  std::function<absl::Status(ServerConfig& config, const std::string& text)> set;
  // The value as text that `set` accepts back.
  std::function<std::string(const ServerConfig& config)> get;
  // Accepts a YAML map as well as a string (latency_budgets: {stt: 60}).
  bool accepts_map = false;
  // Text (quoted in YAML output) rather than a number.
  bool is_string = false;
};

// Every setting of ServerConfig, in the order --help and --print-config show them.
const std::vector<ConfigField>& ConfigFields();

// "WAAV_ENDPOINTING_SILENCE_MS" for "endpointing.silence_ms".
std::string EnvVarName(const std::string& key);
// "endpointing-silence-ms" (without the dashes in front) for "endpointing.silence_ms".
std::string FlagName(const std::string& key);

// Applies a YAML document. Unknown keys, wrong types (a list where a number goes), duplicate
// keys and syntax errors are InvalidArgument naming `source_name`, the key and the line.
absl::Status ApplyYaml(const std::string& yaml_text, const std::string& source_name,
                       ServerConfig* config);
// Reads `path` (at most 1 MiB) and applies it. NotFound when it does not exist.
absl::Status ApplyYamlFile(const std::string& path, ServerConfig* config);

// The process environment, as name -> value, restricted to what waavd reads: WAAV_CONFIG and
// every EnvVarName(key). The only place waavd reads its environment.
std::map<std::string, std::string> EnvironmentFromProcess();

// Applies the WAAV_<KEY> variables of `env` (WAAV_CONFIG is not a setting and is skipped). An
// unknown WAAV_ variable is ignored (other waav programs read their own, e.g. WAAV_MODEL), but a
// bad value is InvalidArgument naming the variable.
absl::Status ApplyEnvironment(const std::map<std::string, std::string>& env, ServerConfig* config);

// The effective configuration as a YAML document that ApplyYaml accepts back.
std::string ConfigToYaml(const ServerConfig& config);

// Command line: adds --config, --print-config and one flag per setting to `app`; after
// app.parse(), Resolve() builds the effective configuration (defaults < YAML < env < flags).
class CommandLine {
 public:
  explicit CommandLine(CLI::App* app);

  // `env` as returned by EnvironmentFromProcess().
  absl::StatusOr<ServerConfig> Resolve(const std::map<std::string, std::string>& env) const;
  bool print_config() const { return print_config_; }

 private:
  std::string config_path_;
  bool print_config_ = false;
  std::map<std::string, std::string> flag_values_;  // key -> text, for flags that were given
  std::map<std::string, CLI::Option*> options_;
};

}  // namespace waav::server
