#include "tools/waav/transcribe_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "engine/audio/resampler.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/runtime/backend_registry.h"

namespace waav::cli {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string OneLine(std::string message) {
  for (char& c : message)
    if (c == '\n' || c == '\r') c = ' ';
  return message;
}

void PrintJson(const std::string& file, const whisper::Transcript& transcript,
               bool word_timestamps) {
  std::string out =
      absl::StrFormat("{\"file\": %s, \"duration_s\": %.3f, \"text\": %s, \"segments\": [",
                      JsonString(file), transcript.duration_s, JsonString(transcript.Text()));
  for (size_t i = 0; i < transcript.segments.size(); ++i) {
    const whisper::Segment& s = transcript.segments[i];
    absl::StrAppendFormat(&out, "%s{\"start\": %.2f, \"end\": %.2f, \"text\": %s",
                          i == 0 ? "" : ", ", s.start_s, s.end_s, JsonString(s.text));
    if (word_timestamps) {
      out += ", \"words\": [";
      for (size_t w = 0; w < s.words.size(); ++w) {
        const whisper::Word& word = s.words[w];
        absl::StrAppendFormat(
            &out, "%s{\"word\": %s, \"start\": %.2f, \"end\": %.2f, \"probability\": %.4f}",
            w == 0 ? "" : ", ", JsonString(word.word), word.start_s, word.end_s,
            word.probability);
      }
      out += "]";
    }
    out += "}";
  }
  out += "]}";
  std::cout << out << std::endl;
}

}  // namespace

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

CLI::App* AddTranscribeCommand(CLI::App& app, TranscribeArgs* args) {
  CLI::App* cmd = app.add_subcommand("transcribe", "Transcribe audio files (WAV) on this machine");
  cmd->add_option("files", args->files, "WAV files: PCM 8/16/24/32-bit or float, any rate")
      ->required();
  cmd->add_option("--model", args->model_dir,
                  "Model folder with model.bin and tokenizer.json (env WAAV_MODEL)")
      ->capture_default_str();
  cmd->add_option("--backend", args->backend, "Compute backend: auto, cpu, ...")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0: all cores)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--gpu-device", args->gpu_device,
                  "GPU ordinal for the cuda and hip backends (auto falls back to the CPU)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1023));
  cmd->add_flag("--json", args->json,
                "Print one JSON object per file: text and segments with start/end seconds");
  cmd->add_flag("--word-timestamps", args->word_timestamps,
                "With --json: words with start/end seconds in every segment, aligned as "
                "faster-whisper's word_timestamps=True (which also moves each next window to "
                "the last word's end)");
  cmd->add_flag("-v,--verbose", args->verbose, "Print load time and real-time factor");
  return cmd;
}

int RunTranscribe(const TranscribeArgs& args) {
  const auto load_start = std::chrono::steady_clock::now();
  BackendOptions backend_options;
  backend_options.num_threads = args.threads;
  backend_options.device_index = args.gpu_device;
  auto backend = CreateBackend(args.backend, backend_options);
  if (!backend.ok()) {
    std::cerr << "waav: " << OneLine(std::string(backend.status().message())) << std::endl;
    return 2;
  }
  auto transcriber = whisper::Transcriber::Load(args.model_dir, **backend);
  if (!transcriber.ok()) {
    std::cerr << "waav: cannot load the model: "
              << OneLine(std::string(transcriber.status().message())) << std::endl;
    return 2;
  }
  if (args.verbose) {
    std::cerr << absl::StrFormat("waav: %s; model %s loaded in %.3f s\n", (*backend)->Describe(),
                                 args.model_dir, SecondsSince(load_start));
  }

  int exit_code = 0;
  for (const std::string& file : args.files) {
    const auto start = std::chrono::steady_clock::now();
    auto audio = audio::LoadAudio16k(file);
    if (!audio.ok()) {
      std::cerr << "waav: " << OneLine(std::string(audio.status().message())) << std::endl;
      exit_code = 1;
      continue;
    }
    whisper::TranscribeOptions options;
    options.word_timestamps = args.word_timestamps;
    auto transcript = (*transcriber)->Transcribe(audio->samples, options);
    if (!transcript.ok()) {
      std::cerr << "waav: " << file << ": " << OneLine(std::string(transcript.status().message()))
                << std::endl;
      exit_code = 1;
      continue;
    }
    if (args.json) {
      PrintJson(file, *transcript, args.word_timestamps);
    } else {
      std::cout << transcript->Text() << std::endl;
    }
    if (args.verbose) {
      const double seconds = SecondsSince(start);
      std::cerr << absl::StrFormat("waav: %s: %.2f s of audio in %.3f s (RTF %.4f)\n", file,
                                   transcript->duration_s, seconds,
                                   seconds / std::max(transcript->duration_s, 1e-9));
    }
  }
  return exit_code;
}

}  // namespace waav::cli
