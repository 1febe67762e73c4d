#include "server/config.h"

#include <filesystem>
#include <fstream>
#include <random>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/config_sources.h"
#include "tests/support/test_env.h"

namespace waav::server {
namespace {

using ::testing::HasSubstr;

std::string WriteTemp(const std::string& name, const std::string& text) {
  static const std::filesystem::path dir = waav::testing::MakeTempDir("waavd-config-test");
  const std::filesystem::path path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

absl::StatusOr<ServerConfig> Resolve(std::vector<std::string> args,
                                     const std::map<std::string, std::string>& env = {}) {
  CLI::App app;
  CommandLine command_line(&app);
  args.insert(args.begin(), "waavd");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return command_line.Resolve(env);
}

TEST(ServerConfigTest, DefaultsAreValid) {
  const ServerConfig config;
  EXPECT_TRUE(config.Validate().ok()) << config.Validate();
  EXPECT_EQ(config.listen, "127.0.0.1:50051");
  EXPECT_EQ(config.metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(EffectiveModelName(config), "whisper-tiny.en");
}

TEST(ServerConfigTest, ValidateNamesTheSettingAndValue) {
  struct Case {
    void (*mutate)(ServerConfig&);
    const char* expected;
  };
  const Case cases[] = {
      {[](ServerConfig& c) { c.listen = "nohost"; }, "listen"},
      {[](ServerConfig& c) { c.listen = "127.0.0.1:99999"; }, "port"},
      {[](ServerConfig& c) { c.listen = "::1:50051"; }, "brackets"},
      {[](ServerConfig& c) { c.metrics_listen = "x:y"; }, "metrics_listen"},
      {[](ServerConfig& c) { c.max_streams = 0; }, "max_streams must be in [1, 100000]; got 0"},
      {[](ServerConfig& c) { c.max_batch = 0; }, "max_batch must be in [1, 256]; got 0"},
      {[](ServerConfig& c) { c.max_batch = 257; }, "max_batch"},
      {[](ServerConfig& c) { c.partial_window_ms = 999; },
       "partial_window_ms must be in [1000, 30000]; got 999"},
      {[](ServerConfig& c) { c.partial_window_ms = 30001; }, "partial_window_ms"},
      {[](ServerConfig& c) { c.partial_window_ms = -2; }, "partial_window_ms"},
      {[](ServerConfig& c) { c.restart_stop_words = 1; },
       "restart_stop_words must be in [2, 16]; got 1"},
      {[](ServerConfig& c) { c.restart_stop_words = 17; }, "restart_stop_words"},
      {[](ServerConfig& c) { c.restart_stop_words = -1; }, "restart_stop_words"},
      {[](ServerConfig& c) { c.vad_threads = -1; }, "vad_threads must be in [0, 16]; got -1"},
      {[](ServerConfig& c) { c.vad_threads = 17; }, "vad_threads"},
      {[](ServerConfig& c) { c.gpu_device = -1; }, "gpu_device must be in [0, 1023]; got -1"},
      {[](ServerConfig& c) { c.gpu_device = 1024; }, "gpu_device"},
      {[](ServerConfig& c) { c.gpu_l2_encoder_mb = -1; },
       "gpu_l2_encoder_mb must be in [0, 1024]; got -1"},
      {[](ServerConfig& c) { c.gpu_l2_encoder_mb = 1025; }, "gpu_l2_encoder_mb"},
      {[](ServerConfig& c) { c.max_message_bytes = 10; }, "max_message_bytes"},
      {[](ServerConfig& c) { c.idle_timeout_s = 0; }, "idle_timeout_s"},
      {[](ServerConfig& c) { c.max_stream_duration_s = -1; }, "max_stream_duration_s"},
      {[](ServerConfig& c) { c.shutdown_grace_s = 1e9; }, "shutdown_grace_s"},
      {[](ServerConfig& c) { c.endpointing.silence_ms = 50; }, "endpointing.silence_ms"},
      {[](ServerConfig& c) { c.pause_partial_ms = -1; }, "pause_partial_ms must be in [0, 10000]"},
      {[](ServerConfig& c) { c.pause_partial_ms = 10001; }, "pause_partial_ms"},
      {[](ServerConfig& c) { c.gap_partial_db = -1; }, "gap_partial_db must be in [0, 60]"},
      {[](ServerConfig& c) { c.start_partial_ms = -2; }, "start_partial_ms must be in [-1, 10000]"},
      {[](ServerConfig& c) { c.start_partial_ms = 10001; }, "start_partial_ms"},
      {[](ServerConfig& c) { c.gap_partial_db = 61; }, "gap_partial_db"},
      {[](ServerConfig& c) { c.gap_partial_min_ms = -1; }, "gap_partial_min_ms"},
      {[](ServerConfig& c) { c.gap_partial_min_ms = 10001; }, "gap_partial_min_ms"},
      {[](ServerConfig& c) { c.commit_min_audio_ms = -1; }, "commit_min_audio_ms"},
      {[](ServerConfig& c) { c.commit_min_audio_ms = 30001; }, "commit_min_audio_ms"},
      {[](ServerConfig& c) { c.endpointing.max_utterance_ms = 60000; }, "max_utterance_ms"},
      {[](ServerConfig& c) { c.endpointing.cold_start_pad_ms = -1; },
       "endpointing.cold_start_pad_ms"},
      {[](ServerConfig& c) { c.endpointing.cold_start_pad_ms = 1001; },
       "endpointing.cold_start_pad_ms"},
      {[](ServerConfig& c) { c.endpointing.vad_threshold = 1; }, "vad_threshold"},
      {[](ServerConfig& c) { c.latency_budgets = "stt=abc"; }, "latency_budgets"},
      {[](ServerConfig& c) { c.latency_budgets = "stt=500"; }, "latency_budgets"},
      {[](ServerConfig& c) { c.log_level = "loud"; }, "log_level"},
      {[](ServerConfig& c) { c.model_dir = ""; }, "model_dir"},
      {[](ServerConfig& c) { c.offline_workers = 0; }, "offline_workers"},
  };
  for (const Case& c : cases) {
    ServerConfig config;
    c.mutate(config);
    const absl::Status status = config.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.expected));
  }
}

TEST(ServerConfigTest, HostPortForms) {
  HostPort hp;
  ASSERT_TRUE(ParseHostPort("0.0.0.0:0", &hp).ok());
  EXPECT_EQ(hp.host, "0.0.0.0");
  EXPECT_EQ(hp.port, 0);
  ASSERT_TRUE(ParseHostPort("[::1]:9464", &hp).ok());
  EXPECT_EQ(hp.host, "::1");
  EXPECT_EQ(hp.port, 9464);
  ASSERT_TRUE(ParseHostPort("localhost:1", &hp).ok());
  EXPECT_FALSE(ParseHostPort(":80", &hp).ok());
  EXPECT_FALSE(ParseHostPort("host:", &hp).ok());
  EXPECT_FALSE(ParseHostPort("host:-1", &hp).ok());
  EXPECT_FALSE(ParseHostPort("[::1:80", &hp).ok());
}

TEST(ServerConfigTest, YamlSetsNestedAndMapValues) {
  ServerConfig config;
  const absl::Status status = ApplyYaml(
      "listen: 0.0.0.0:6000\n"
      "max_streams: 64\n"
      "idle_timeout_s: 2.5\n"
      "endpointing:\n"
      "  silence_ms: 800\n"
      "  vad_threshold: 0.6\n"
      "latency_budgets:\n"
      "  stt: 60\n"
      "  margin: 10\n",
      "test.yaml", &config);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(config.listen, "0.0.0.0:6000");
  EXPECT_EQ(config.max_streams, 64);
  EXPECT_DOUBLE_EQ(config.idle_timeout_s, 2.5);
  EXPECT_EQ(config.endpointing.silence_ms, 800);
  EXPECT_DOUBLE_EQ(config.endpointing.vad_threshold, 0.6);
  EXPECT_EQ(config.latency_budgets, "stt=60,margin=10");
  EXPECT_TRUE(config.Validate().ok()) << config.Validate();
}

TEST(ServerConfigTest, YamlErrorsNameTheFileKeyAndLine) {
  struct Case {
    const char* yaml;
    const char* expected;
  };
  const Case cases[] = {
      {"listen: a:1\nmax_stream: 3\n", "test.yaml:2:1: unknown key 'max_stream'"},
      {"endpointing:\n  silence: 3\n", "unknown key 'endpointing.silence'"},
      {"max_streams: many\n", "test.yaml:1:14: 'max_streams': expected an integer, got 'many'"},
      {"max_streams: [1, 2]\n", "'max_streams' takes a single value, not a list"},
      {"max_streams: {a: 1}\n", "'max_streams' takes a single value, not a map"},
      {"max_streams:\n", "'max_streams' has no value"},
      {"endpointing: 3\n", "'endpointing' is a section"},
      {"max_streams: 1\nmax_streams: 2\n", "'max_streams' is set twice"},
      {"- a\n- b\n", "the top level must be a map"},
      {"listen: [unclosed\n", "not valid YAML"},
      {"listen: a: b\n", "not valid YAML"},
      {"latency_budgets: {stt: [1]}\n", "entries are name: number"},
      {"idle_timeout_s: nan\n", "expected a number"},
  };
  for (const Case& c : cases) {
    ServerConfig config;
    const ServerConfig before = config;
    const absl::Status status = ApplyYaml(c.yaml, "test.yaml", &config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.expected)) << c.yaml;
    EXPECT_EQ(config.max_streams, before.max_streams) << "a failing file applied part of itself";
  }
}

TEST(ServerConfigTest, EmptyYamlChangesNothing) {
  ServerConfig config;
  EXPECT_TRUE(ApplyYaml("", "empty.yaml", &config).ok());
  EXPECT_TRUE(ApplyYaml("# only a comment\n", "c.yaml", &config).ok());
  EXPECT_EQ(config.max_streams, ServerConfig().max_streams);
}

TEST(ServerConfigTest, YamlFileErrors) {
  ServerConfig config;
  EXPECT_EQ(ApplyYamlFile("/nonexistent/waavd.yaml", &config).code(), absl::StatusCode::kNotFound);
  const std::string big = WriteTemp("big.yaml", std::string((1 << 20) + 10, '#'));
  const absl::Status status = ApplyYamlFile(big, &config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("larger than"));
  // Random bytes: an error naming the file, never a crash.
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  const std::string path = WriteTemp("garbage.yaml", garbage);
  const absl::Status garbage_status = ApplyYamlFile(path, &config);
  EXPECT_FALSE(garbage_status.ok()) << "seed " << seed;
  EXPECT_THAT(std::string(garbage_status.message()), HasSubstr(path)) << "seed " << seed;
  // Truncated: a valid file cut in the middle of a nested map.
  const std::string truncated = WriteTemp("truncated.yaml", "endpointing:\n  silence_ms: \"50");
  EXPECT_FALSE(ApplyYamlFile(truncated, &config).ok());
}

TEST(ServerConfigTest, PrecedenceIsDefaultsThenFileThenEnvironmentThenFlags) {
  const std::string file =
      WriteTemp("p.yaml", "max_streams: 5\nidle_timeout_s: 7\nlog_level: warn\n");
  auto config = Resolve({"--config", file, "--max-streams", "9"},
                        {{"WAAV_MAX_STREAMS", "6"}, {"WAAV_IDLE_TIMEOUT_S", "8"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_streams, 9);            // flag over env over file
  EXPECT_DOUBLE_EQ(config->idle_timeout_s, 8);  // env over file
  EXPECT_EQ(config->log_level, "warn");         // file over default
  EXPECT_EQ(config->shutdown_grace_s, 25);      // default

  // WAAV_CONFIG names the file when --config is absent.
  config = Resolve({}, {{"WAAV_CONFIG", file}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_streams, 5);
  // Nested keys have their own variables and flags.
  config =
      Resolve({"--endpointing-silence-ms", "900"}, {{"WAAV_ENDPOINTING_MIN_SPEECH_MS", "100"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->endpointing.silence_ms, 900);
  EXPECT_EQ(config->endpointing.min_speech_ms, 100);
  EXPECT_EQ(config->endpointing.cold_start_pad_ms, 400);  // default
  config = Resolve({"--endpointing-cold-start-pad-ms", "250"}, {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->endpointing.cold_start_pad_ms, 250);
  config = Resolve({"--max-batch", "4"}, {{"WAAV_MAX_BATCH", "2"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_batch, 4);
  config = Resolve({}, {{"WAAV_MAX_BATCH", "2"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_batch, 2);
  config = Resolve({"--vad-threads", "3"}, {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vad_threads, 3);
  config = Resolve({}, {{"WAAV_VAD_THREADS", "2"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vad_threads, 2);
  EXPECT_EQ(config->gpu_device, 0);
  config = Resolve({"--gpu-device", "1"}, {{"WAAV_GPU_DEVICE", "3"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->gpu_device, 1);
  config = Resolve({}, {{"WAAV_GPU_DEVICE", "3"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->gpu_device, 3);
  EXPECT_FALSE(Resolve({"--gpu-device", "-2"}, {}).ok());
  EXPECT_FALSE(Resolve({}, {{"WAAV_GPU_DEVICE", "first"}}).ok());
  EXPECT_EQ(config->gpu_l2_encoder_mb, 0);
  config = Resolve({"--gpu-l2-encoder-mb", "16"}, {{"WAAV_GPU_L2_ENCODER_MB", "24"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->gpu_l2_encoder_mb, 16);
  config = Resolve({}, {{"WAAV_GPU_L2_ENCODER_MB", "24"}});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->gpu_l2_encoder_mb, 24);
  EXPECT_FALSE(Resolve({"--gpu-l2-encoder-mb", "2048"}, {}).ok());
  EXPECT_FALSE(Resolve({}, {{"WAAV_GPU_L2_ENCODER_MB", "lots"}}).ok());
}

// Auto VAD threads: one on small machines (the CPU Whisper backend needs the cores), a few on
// large ones, never more than 4; an explicit value wins.
TEST(ServerConfigTest, EffectiveVadThreads) {
  ServerConfig config;
  EXPECT_EQ(EffectiveVadThreads(config, 1), 1);
  EXPECT_EQ(EffectiveVadThreads(config, 2), 1);
  EXPECT_EQ(EffectiveVadThreads(config, 7), 1);
  EXPECT_EQ(EffectiveVadThreads(config, 8), 2);
  EXPECT_EQ(EffectiveVadThreads(config, 16), 3);
  EXPECT_EQ(EffectiveVadThreads(config, 128), 4);
  config.vad_threads = 6;
  EXPECT_EQ(EffectiveVadThreads(config, 2), 6);
}

// Auto interim windows: short on the CPU, 30 s on a GPU; an explicit value wins.
TEST(ServerConfigTest, EffectivePartialWindowMs) {
  ServerConfig config;
  EXPECT_EQ(config.partial_window_ms, -1);
  EXPECT_EQ(EffectivePartialWindowMs(config, /*whisper_on_cpu=*/true), 5000);
  EXPECT_EQ(EffectivePartialWindowMs(config, /*whisper_on_cpu=*/false), 0);
  config.partial_window_ms = 0;
  EXPECT_EQ(EffectivePartialWindowMs(config, true), 0);
  config.partial_window_ms = 3000;
  EXPECT_EQ(EffectivePartialWindowMs(config, false), 3000);
  EXPECT_TRUE(config.Validate().ok());
}

TEST(ServerConfigTest, BadValuesFromEachSourceNameTheirSource) {
  auto config = Resolve({}, {{"WAAV_MAX_STREAMS", "lots"}});
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("WAAV_MAX_STREAMS"));
  config = Resolve({"--max-streams", "lots"});
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("--max-streams"));
  config = Resolve({"--max-streams", "0"});
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("max_streams"));
  config = Resolve({"--no-such-flag", "1"});
  EXPECT_FALSE(config.ok());
  // Unknown WAAV_ variables belong to other programs (WAAV_MODEL is the CLI's).
  EXPECT_TRUE(Resolve({}, {{"WAAV_MODEL", "x"}}).ok());
}

TEST(ServerConfigTest, PrintedConfigLoadsBackToTheSameConfig) {
  ServerConfig config;
  config.listen = "0.0.0.0:1234";
  config.model_name = "name with \"quotes\" and \\";
  config.latency_budgets = "stt=60,margin=10";
  config.endpointing.vad_threshold = 0.35;
  const std::string yaml = ConfigToYaml(config);
  ServerConfig loaded;
  ASSERT_TRUE(ApplyYaml(yaml, "printed", &loaded).ok()) << yaml;
  EXPECT_EQ(ConfigToYaml(loaded), yaml);
  EXPECT_EQ(loaded.model_name, config.model_name);
}

TEST(ServerConfigTest, EverySettingHasAVariableAFlagAndDocumentation) {
  std::ifstream doc(waav::testing::SourceDir() + "/docs/server.md");
  ASSERT_TRUE(doc) << "docs/server.md missing";
  const std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  for (const ConfigField& field : ConfigFields()) {
    EXPECT_THAT(text, HasSubstr("`" + field.key + "`")) << "docs/server.md lacks " << field.key;
    EXPECT_THAT(text, HasSubstr(EnvVarName(field.key)));
    EXPECT_THAT(text, HasSubstr("--" + FlagName(field.key)));
  }
  EXPECT_EQ(EnvVarName("endpointing.silence_ms"), "WAAV_ENDPOINTING_SILENCE_MS");
  EXPECT_EQ(FlagName("endpointing.silence_ms"), "endpointing-silence-ms");
}

TEST(ServerConfigTest, SampleDeployConfigIsValid) {
  ServerConfig config;
  const absl::Status status =
      ApplyYamlFile(waav::testing::SourceDir() + "/deploy/waavd.yaml", &config);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_TRUE(config.Validate().ok()) << config.Validate();
}

}  // namespace
}  // namespace waav::server
