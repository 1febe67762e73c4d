// `waav recognize FILE`: whole-file recognition through waavd's Recognize (one request, one
// response), printing one line per utterance.
#pragma once

#include <string>

#include "tools/waav/grpc_client.h"
#include "tools/waav/stream_command.h"

namespace waav::cli {

struct RecognizeArgs {
  std::string file;
  std::string server = kDefaultServer;  // --server HOST:PORT
  std::string encoding = "auto";        // see kEncodingChoices
  bool words = false;                   // --words: ask for word time offsets (seen with --json)
  bool json = false;                    // print the response as one line of JSON
  bool verbose = false;                 // -v: per-utterance times and the real-time factor
  std::string model;                    // empty: the server's default
  std::string language;                 // empty: the model's default
  std::string request_id;               // empty: the server makes one
  double timeout_s = 0;                 // deadline; 0: none
};

CLI::App* AddRecognizeCommand(CLI::App& app, RecognizeArgs* args);

// Exit code: 0 when the call succeeded; 1 when it failed (one line on `err` with the status
// code's name and message); 2 for bad arguments or an unreadable file.
int RunRecognize(const RecognizeArgs& args, const CommandOutput& io);

}  // namespace waav::cli
