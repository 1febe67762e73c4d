// waav: the command-line client. `waav transcribe FILE` runs Whisper locally; `stream`,
// `recognize` and `health` talk to a waavd server (one file per command beside this one).
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "kernels/cpu/openblas_setup.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tools/waav/health_command.h"
#include "tools/waav/recognize_command.h"
#include "tools/waav/stream_command.h"
#include "tools/waav/transcribe_command.h"

#ifndef WAAV_DEFAULT_MODEL_DIR
#define WAAV_DEFAULT_MODEL_DIR "models/whisper-tiny.en"
#endif

namespace {

int TerminalColumns() {
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

}  // namespace

int main(int argc, char** argv) {
  waav::cpu::EnsureOpenBlasCoreType(argv);
  CLI::App app{"waav: real-time speech recognition and synthesis"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(WAAV_VERSION) + " (" + WAAV_REVISION + ")");

  waav::cli::TranscribeArgs transcribe;
  // The only environment variable the CLI reads: where the model lives when --model is absent.
  const char* env_model = std::getenv("WAAV_MODEL");
  transcribe.model_dir = env_model != nullptr ? env_model : WAAV_DEFAULT_MODEL_DIR;
  CLI::App* transcribe_cmd = waav::cli::AddTranscribeCommand(app, &transcribe);
  waav::cli::StreamArgs stream;
  CLI::App* stream_cmd = waav::cli::AddStreamCommand(app, &stream);
  waav::cli::RecognizeArgs recognize;
  CLI::App* recognize_cmd = waav::cli::AddRecognizeCommand(app, &recognize);
  waav::cli::HealthArgs health;
  CLI::App* health_cmd = waav::cli::AddHealthCommand(app, &health);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Logs go to stderr so that stdout carries only transcripts; without --verbose only errors
  // are shown, so a failing file is reported in exactly one line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("waav"));
  spdlog::set_level(transcribe.verbose ? spdlog::level::info : spdlog::level::err);
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  const waav::cli::CommandOutput io{std::cout, std::cerr, terminal,
                                    terminal ? TerminalColumns() : 80};
  if (transcribe_cmd->parsed()) return waav::cli::RunTranscribe(transcribe);
  if (stream_cmd->parsed()) return waav::cli::RunStream(stream, io);
  if (recognize_cmd->parsed()) return waav::cli::RunRecognize(recognize, io);
  if (health_cmd->parsed()) return waav::cli::RunHealth(health, io);
  return 0;
}
