// waav: the command-line client. `waav transcribe FILE` runs Whisper locally; later commands
// (stream, recognize, health, synthesize) talk to a waavd server.
#include <cstdlib>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "kernels/cpu/openblas_setup.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tools/waav/transcribe_command.h"

#ifndef WAAV_DEFAULT_MODEL_DIR
#define WAAV_DEFAULT_MODEL_DIR "models/whisper-tiny.en"
#endif

int main(int argc, char** argv) {
  waav::cpu::EnsureOpenBlasCoreType(argv);
  CLI::App app{"waav: real-time speech recognition and synthesis"};
  app.require_subcommand(1);

  waav::cli::TranscribeArgs transcribe;
  // The only environment variable the CLI reads: where the model lives when --model is absent.
  const char* env_model = std::getenv("WAAV_MODEL");
  transcribe.model_dir = env_model != nullptr ? env_model : WAAV_DEFAULT_MODEL_DIR;
  CLI::App* cmd = app.add_subcommand("transcribe", "Transcribe audio files (WAV) on this machine");
  cmd->add_option("files", transcribe.files, "WAV files: PCM 8/16/24/32-bit or float, any rate")
      ->required();
  cmd->add_option("--model", transcribe.model_dir,
                  "Model folder with model.bin and tokenizer.json (env WAAV_MODEL)")
      ->capture_default_str();
  cmd->add_option("--backend", transcribe.backend, "Compute backend: auto, cpu, ...")
      ->capture_default_str();
  cmd->add_option("--threads", transcribe.threads, "CPU threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--json", transcribe.json,
                "Print one JSON object per file: text and segments with start/end seconds");
  cmd->add_flag("-v,--verbose", transcribe.verbose, "Print load time and real-time factor");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Logs go to stderr so that stdout carries only transcripts; without --verbose only errors
  // are shown, so a failing file is reported in exactly one line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("waav"));
  spdlog::set_level(transcribe.verbose ? spdlog::level::info : spdlog::level::err);
  if (cmd->parsed()) return waav::cli::RunTranscribe(transcribe);
  return 0;
}
