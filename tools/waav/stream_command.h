// `waav stream FILE`: streams a file to waavd's StreamingRecognize at real-time pace (or as fast
// as the server takes it, --fast) and prints the transcript as it forms.
#pragma once

#include <ostream>
#include <string>

#include "tools/waav/client_audio.h"
#include "tools/waav/grpc_client.h"

namespace CLI {
class App;
}  // namespace CLI

namespace waav::cli {

struct StreamArgs {
  std::string file;
  std::string server = kDefaultServer;  // --server HOST:PORT
  bool fast = false;                    // send as fast as flow control allows
  double speed = 1.0;                   // --speed: multiple of real time (ignored with --fast)
  int chunk_ms = 100;                   // audio per message
  std::string encoding = "auto";        // see kEncodingChoices
  bool interim = true;                  // --interim / --no-interim
  bool words = false;                   // --words: ask for word time offsets (shown in --json)
  bool json = false;                    // one JSON object per response line
  bool verbose = false;                 // -v: stream start, speech events, per-final timing
  std::string model;                    // empty: the server's default
  std::string language;                 // empty: the model's default
  std::string request_id;               // empty: the server makes one
  int silence_ms = 0;                   // endpointing silence; 0: the server's default
  double timeout_s = 0;                 // deadline for the whole stream; 0: none
};

// Where a command writes, and what it knows about the terminal.
struct CommandOutput {
  std::ostream& out;
  std::ostream& err;
  bool terminal = false;  // `out` is a terminal
  int width = 80;         // its columns
};

// Registers the subcommand with its options on `app`; the values land in `*args`.
CLI::App* AddStreamCommand(CLI::App& app, StreamArgs* args);

// Runs it. Exit code: 0 when the stream ended OK; 1 when the call failed (one line on `err`
// with the status code's name and message); 2 for bad arguments or an unreadable file.
int RunStream(const StreamArgs& args, const CommandOutput& io);

}  // namespace waav::cli
