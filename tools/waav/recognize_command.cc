#include "tools/waav/recognize_command.h"

#include <chrono>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "tools/waav/client_audio.h"
#include "waav/v1/recognizer.grpc.pb.h"

namespace waav::cli {

CLI::App* AddRecognizeCommand(CLI::App& app, RecognizeArgs* args) {
  CLI::App* cmd =
      app.add_subcommand("recognize", "Recognize a whole audio file with waavd in one request");
  cmd->add_option("file", args->file, "WAV (any PCM/float format), FLAC or Ogg Opus file")
      ->required();
  cmd->add_option("--server", args->server, "waavd address, HOST:PORT")->capture_default_str();
  cmd->add_option("--encoding", args->encoding,
                  absl::StrCat("What to send: ", kEncodingChoices,
                               " (auto: LINEAR16 for WAV, the file's own for FLAC/Ogg)"))
      ->capture_default_str();
  cmd->add_flag("--words", args->words, "Ask for word time offsets (seen with --json)");
  cmd->add_flag("--json", args->json, "Print the response as one line of JSON");
  cmd->add_flag("-v,--verbose", args->verbose,
                "Print each utterance's times and the real-time factor on stderr");
  cmd->add_option("--model", args->model, "Model name (default: the server's)");
  cmd->add_option("--language", args->language, "Spoken language, BCP-47 (default: the model's)");
  cmd->add_option("--request-id", args->request_id, "Request id (default: the server makes one)");
  cmd->add_option("--timeout", args->timeout_s, "Deadline, s (0: none)");
  return cmd;
}

int RunRecognize(const RecognizeArgs& args, const CommandOutput& io) {
  absl::Status valid = ValidateServerAddress(args.server);
  absl::StatusOr<EncodingChoice> encoding = ParseEncodingChoice(args.encoding);
  if (valid.ok() && !encoding.ok()) valid = encoding.status();
  if (valid.ok() && !(args.timeout_s >= 0)) {
    valid = absl::InvalidArgumentError(absl::StrCat("--timeout ", args.timeout_s, " is negative"));
  }
  if (!valid.ok()) {
    io.err << "waav: recognize: " << OneLine(std::string(valid.message())) << std::endl;
    return 2;
  }
  ClientAudioOptions audio_options;
  audio_options.encoding = *encoding;
  absl::StatusOr<ClientAudio> audio = LoadClientAudio(args.file, audio_options);
  if (!audio.ok()) {
    io.err << "waav: recognize: " << OneLine(std::string(audio.status().message())) << std::endl;
    return 2;
  }

  v1::RecognizeRequest request;
  v1::RecognitionConfig* config = request.mutable_config();
  *config->mutable_audio_format() = audio->format;
  config->set_model(args.model);
  config->set_language(args.language);
  config->set_enable_word_time_offsets(args.words);
  request.set_audio(std::move(audio->bytes));
  request.set_request_id(args.request_id);

  auto stub = v1::Recognizer::NewStub(MakeChannel(args.server));
  grpc::ClientContext context;
  if (args.timeout_s > 0) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(static_cast<int64_t>(args.timeout_s * 1000)));
  }
  v1::RecognizeResponse response;
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status status = stub->Recognize(&context, request, &response);
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) {
    io.err << "waav: recognize " << args.file << ": " << DescribeStatus(status) << " (server "
           << args.server << ")" << std::endl;
    return 1;
  }

  if (args.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.preserve_proto_field_names = true;
    print.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(response, &json, print);
    io.out << json << std::endl;
  }
  for (const v1::RecognitionResult& result : response.results()) {
    const std::string text =
        result.alternatives_size() > 0 ? result.alternatives(0).transcript() : "";
    if (!args.json && !text.empty()) io.out << text << '\n';
    if (args.verbose) {
      io.err << absl::StrFormat("waav: %.2f s to %.2f s, %s\n", result.start_ms() / 1000.0,
                                result.end_ms() / 1000.0,
                                v1::UtteranceEndReason_Name(result.end_reason()));
    }
  }
  io.out.flush();
  if (args.verbose) {
    const double audio_s = response.audio_duration_ms() / 1000.0;
    io.err << absl::StrFormat(
                  "waav: %.2f s of audio; server %.3f s (RTF %.4f), round trip %.3f s; model %s; "
                  "request id %s",
                  audio_s, response.processing_ms() / 1000.0,
                  audio_s > 0 ? response.processing_ms() / 1000.0 / audio_s : 0.0, elapsed_s,
                  response.model(), response.request_id())
           << std::endl;
  }
  return 0;
}

}  // namespace waav::cli
