// How `waav stream` shows a stream's responses.
//
// Text mode, on a terminal: the latest interim result of the utterance being spoken is redrawn in
// place on one line (carriage return, then erase to the end of the line), its unstable tail
// dimmed; each final result replaces it and stays on its own line. Text mode, not a terminal
// (a pipe or a file): final results only, one line each, so the output is the transcript.
// JSON mode: every response as one line of proto3 JSON (field names as in the .proto), which
// parses back into the message.
// Verbose: the stream's start, speech events and a line per final result go to `err`; on a
// terminal the partial line is cleared first and redrawn after, so the two never garble.
#pragma once

#include <ostream>
#include <string>

#include "waav/v1/recognizer.pb.h"

namespace waav::cli {

struct StreamPrinterOptions {
  bool json = false;      // one JSON object per response and line
  bool terminal = false;  // `out` is a terminal: draw partials in place
  int width = 80;         // the terminal's columns; partials are cut to fit one line
  bool verbose = false;   // start, events and per-final timing on `err`
};

class StreamPrinter {
 public:
  StreamPrinter(std::ostream& out, std::ostream& err, const StreamPrinterOptions& options);

  void OnResponse(const v1::StreamingRecognizeResponse& response);
  // Clears a partial line still on screen (the stream ended before its final result).
  void Finish();

  int finals() const { return finals_; }
  const std::string& request_id() const { return request_id_; }

  // The line drawn for an interim result, without escapes: the transcript, or, when it is
  // longer than `width - 1` code points, "…" and its last `width - 2` code points. `*stable_bytes`
  // receives how many leading bytes of the returned line belong to the stable prefix.
  static std::string FitPartial(const std::string& transcript, size_t stable_size, int width,
                                size_t* stable_bytes);

 private:
  void DrawPartial();
  void ClearPartial();
  void Verbose(const std::string& line);

  std::ostream& out_;
  std::ostream& err_;
  StreamPrinterOptions options_;
  std::string partial_;        // the interim transcript on screen ("" when none)
  size_t partial_stable_ = 0;  // bytes of partial_ that are stable
  bool partial_shown_ = false;
  int finals_ = 0;
  std::string request_id_;
};

}  // namespace waav::cli
