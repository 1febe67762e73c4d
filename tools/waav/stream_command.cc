#include "tools/waav/stream_command.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/client_context.h"
#include "tools/waav/stream_printer.h"
#include "waav/v1/recognizer.grpc.pb.h"

namespace waav::cli {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status ValidateStreamArgs(const StreamArgs& args) {
  if (absl::Status s = ValidateServerAddress(args.server); !s.ok()) return s;
  if (!args.fast && !(args.speed > 0 && args.speed <= 1000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--speed ", args.speed, " is outside (0, 1000]; use --fast for no pacing"));
  }
  if (args.silence_ms != 0 && (args.silence_ms < 100 || args.silence_ms > 10000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--silence-ms ", args.silence_ms, " is outside 100..10000"));
  }
  if (!(args.timeout_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--timeout ", args.timeout_s, " is negative"));
  }
  return ParseEncodingChoice(args.encoding).status();
}

v1::StreamingRecognizeRequest ConfigRequest(const StreamArgs& args, const ClientAudio& audio) {
  v1::StreamingRecognizeRequest request;
  v1::StreamingRecognitionConfig* config = request.mutable_config();
  v1::RecognitionConfig* recognition = config->mutable_recognition();
  *recognition->mutable_audio_format() = audio.format;
  recognition->set_model(args.model);
  recognition->set_language(args.language);
  recognition->set_enable_word_time_offsets(args.words);
  config->set_interim_results(args.interim);
  if (args.silence_ms != 0) {
    config->mutable_endpointing()->set_silence_ms(static_cast<uint32_t>(args.silence_ms));
  }
  config->set_request_id(args.request_id);
  return request;
}

}  // namespace

CLI::App* AddStreamCommand(CLI::App& app, StreamArgs* args) {
  CLI::App* cmd = app.add_subcommand(
      "stream", "Stream an audio file to waavd at real-time pace and print the transcript live");
  cmd->add_option("file", args->file, "WAV (any PCM/float format), FLAC or Ogg Opus file")
      ->required();
  cmd->add_option("--server", args->server, "waavd address, HOST:PORT")->capture_default_str();
  cmd->add_flag("--fast", args->fast, "Send as fast as the server accepts, not in real time");
  cmd->add_option("--speed", args->speed, "Pace at this multiple of real time")
      ->capture_default_str();
  cmd->add_option("--chunk-ms", args->chunk_ms, "Audio per message, ms (10..5000)")
      ->capture_default_str();
  cmd->add_option("--encoding", args->encoding,
                  absl::StrCat("What to send: ", kEncodingChoices,
                               " (auto: LINEAR16 for WAV, the file's own for FLAC/Ogg)"))
      ->capture_default_str();
  cmd->add_flag("--interim,!--no-interim", args->interim,
                "Ask for interim (partial) results (default on)");
  cmd->add_flag("--words", args->words, "Ask for word time offsets (seen with --json)");
  cmd->add_flag("--json", args->json, "Print every response as one line of JSON");
  cmd->add_flag("-v,--verbose", args->verbose,
                "Print the stream's start, speech events and timing of finals on stderr");
  cmd->add_option("--model", args->model, "Model name (default: the server's)");
  cmd->add_option("--language", args->language, "Spoken language, BCP-47 (default: the model's)");
  cmd->add_option("--request-id", args->request_id, "Request id (default: the server makes one)");
  cmd->add_option("--silence-ms", args->silence_ms,
                  "Silence that ends an utterance, ms (100..10000; default: the server's)");
  cmd->add_option("--timeout", args->timeout_s, "Deadline for the whole stream, s (0: none)");
  return cmd;
}

int RunStream(const StreamArgs& args, const CommandOutput& io) {
  const std::string what = absl::StrCat("waav: stream ", args.file, ": ");
  if (absl::Status s = ValidateStreamArgs(args); !s.ok()) {
    io.err << "waav: stream: " << OneLine(std::string(s.message())) << std::endl;
    return 2;
  }
  ClientAudioOptions audio_options;
  audio_options.encoding = *ParseEncodingChoice(args.encoding);
  audio_options.chunk_ms = args.chunk_ms;
  absl::StatusOr<ClientAudio> audio = LoadClientAudio(args.file, audio_options);
  if (!audio.ok()) {
    io.err << "waav: stream: " << OneLine(std::string(audio.status().message())) << std::endl;
    return 2;
  }

  auto stub = v1::Recognizer::NewStub(MakeChannel(args.server));
  grpc::ClientContext context;
  if (args.timeout_s > 0) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000)));
  }
  auto stream = stub->StreamingRecognize(&context);
  const double speed = args.fast ? 0 : args.speed;

  // The writer paces the audio on the steady clock while this thread reads; a read that ends
  // (the stream failed or finished) wakes the writer so it stops at once.
  std::mutex mu;
  std::condition_variable wake;
  bool stop = false;
  const Clock::time_point start = Clock::now();
  std::thread writer([&] {
    if (!stream->Write(ConfigRequest(args, *audio))) return;
    v1::StreamingRecognizeRequest request;
    for (const AudioChunk& chunk : audio->chunks) {
      {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait_until(lock, ChunkDueTime(start, chunk.end_us, speed), [&] { return stop; });
        if (stop) return;
      }
      request.set_audio(audio->bytes.data() + chunk.begin, chunk.end - chunk.begin);
      if (!stream->Write(request)) return;
    }
    stream->WritesDone();
  });

  StreamPrinterOptions printer_options;
  printer_options.json = args.json;
  printer_options.terminal = io.terminal;
  printer_options.width = io.width;
  printer_options.verbose = args.verbose;
  StreamPrinter printer(io.out, io.err, printer_options);
  v1::StreamingRecognizeResponse response;
  uint32_t processed_ms = 0;
  while (stream->Read(&response)) {
    processed_ms = response.processed_audio_ms();
    printer.OnResponse(response);
  }
  {
    // The stream is over: a writer waiting for its next chunk stops now, and one inside
    // Write() returns false there (the call is finished). Cancelling instead would replace the
    // server's status with CANCELLED.
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  wake.notify_all();
  writer.join();
  const grpc::Status status = stream->Finish();
  printer.Finish();
  if (!status.ok()) {
    io.err << what << DescribeStatus(status) << " (server " << args.server;
    if (!printer.request_id().empty()) io.err << ", request id " << printer.request_id();
    io.err << ")" << std::endl;
    return 1;
  }
  if (args.verbose) {
    const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    io.err << absl::StrFormat(
                  "waav: %.2f s of audio streamed in %.2f s; server processed %.2f s; %d final "
                  "results; request id %s",
                  audio->duration_us / 1e6, elapsed_s, processed_ms / 1000.0, printer.finals(),
                  printer.request_id())
           << std::endl;
  }
  return 0;
}

}  // namespace waav::cli
