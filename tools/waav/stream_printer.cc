#include "tools/waav/stream_printer.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

namespace waav::cli {
namespace {

constexpr char kClearLine[] = "\r\x1b[K";
constexpr char kDim[] = "\x1b[2m";
constexpr char kReset[] = "\x1b[0m";

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

size_t CodePoints(const std::string& s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return !IsContinuationByte(c); }));
}

std::string Seconds(uint32_t ms) { return absl::StrFormat("%.2f s", ms / 1000.0); }

const char* EndReasonName(v1::UtteranceEndReason reason) {
  switch (reason) {
    case v1::UTTERANCE_END_REASON_SILENCE:
      return "silence";
    case v1::UTTERANCE_END_REASON_MAX_LENGTH:
      return "max length";
    case v1::UTTERANCE_END_REASON_END_OF_AUDIO:
      return "end of audio";
    case v1::UTTERANCE_END_REASON_STREAM_LIMIT:
      return "stream limit";
    default:
      return "unspecified";
  }
}

}  // namespace

StreamPrinter::StreamPrinter(std::ostream& out, std::ostream& err,
                             const StreamPrinterOptions& options)
    : out_(out), err_(err), options_(options) {
  options_.width = std::max(options_.width, 10);
}

std::string StreamPrinter::FitPartial(const std::string& transcript, size_t stable_size, int width,
                                      size_t* stable_bytes) {
  stable_size = std::min(stable_size, transcript.size());
  const size_t budget = static_cast<size_t>(std::max(width, 10) - 1);
  if (CodePoints(transcript) <= budget) {
    *stable_bytes = stable_size;
    return transcript;
  }
  // Keep the last budget - 1 code points, after an ellipsis.
  size_t keep = budget - 1;
  size_t cut = transcript.size();
  while (cut > 0 && keep > 0) {
    --cut;
    if (!IsContinuationByte(transcript[cut])) --keep;
  }
  const std::string ellipsis = "\xE2\x80\xA6";  // U+2026
  *stable_bytes = stable_size > cut ? ellipsis.size() + (stable_size - cut) : 0;
  return ellipsis + transcript.substr(cut);
}

void StreamPrinter::DrawPartial() {
  if (!options_.terminal || options_.json || partial_.empty()) return;
  size_t stable = 0;
  const std::string line = FitPartial(partial_, partial_stable_, options_.width, &stable);
  out_ << kClearLine << line.substr(0, stable);
  if (stable < line.size()) out_ << kDim << line.substr(stable) << kReset;
  out_.flush();
  partial_shown_ = true;
}

void StreamPrinter::ClearPartial() {
  if (!partial_shown_) return;
  out_ << kClearLine;
  out_.flush();
  partial_shown_ = false;
}

void StreamPrinter::Verbose(const std::string& line) {
  if (!options_.verbose) return;
  ClearPartial();
  err_ << "waav: " << line << std::endl;
  DrawPartial();
}

void StreamPrinter::OnResponse(const v1::StreamingRecognizeResponse& response) {
  if (!response.request_id().empty()) request_id_ = response.request_id();
  if (options_.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.preserve_proto_field_names = true;
    print.always_print_primitive_fields = true;
    if (google::protobuf::util::MessageToJsonString(response, &json, print).ok()) {
      out_ << json << '\n';
      out_.flush();
    }
  }
  switch (response.content_case()) {
    case v1::StreamingRecognizeResponse::kStarted: {
      const v1::StreamStarted& s = response.started();
      const v1::StreamingRecognitionConfig& c = s.effective_config();
      Verbose(absl::StrFormat(
          "stream %s: model %s (%s), interim results %s, endpoint after %u ms of silence",
          response.request_id(), s.model().name(), s.model().backend(),
          c.interim_results() ? "on" : "off", c.endpointing().silence_ms()));
      break;
    }
    case v1::StreamingRecognizeResponse::kEvent: {
      const v1::SpeechEvent& e = response.event();
      const std::string type = v1::SpeechEvent::Type_Name(e.type());
      Verbose(absl::StrFormat("%s, utterance %u, at %s (detected at %s)", type, e.utterance_index(),
                              Seconds(e.offset_ms()), Seconds(e.detected_at_ms())));
      break;
    }
    case v1::StreamingRecognizeResponse::kResult: {
      const v1::StreamingRecognitionResult& r = response.result();
      const std::string text = r.alternatives_size() > 0 ? r.alternatives(0).transcript() : "";
      if (!r.is_final()) {
        partial_ = text;
        partial_stable_ = r.stable_transcript().size();
        if (partial_.empty()) {
          ClearPartial();
        } else {
          DrawPartial();
        }
        break;
      }
      ++finals_;
      ClearPartial();
      partial_.clear();
      if (!options_.json && !text.empty()) {
        out_ << text << '\n';
        out_.flush();
      }
      Verbose(absl::StrFormat(
          "final %u: %s to %s, ended by %s; audio to result %.0f ms, server %.0f ms",
          r.utterance_index(), Seconds(r.start_ms()), Seconds(r.end_ms()),
          EndReasonName(r.end_reason()), r.latency().audio_to_result_ms(),
          r.latency().server_ms()));
      break;
    }
    default:
      break;
  }
}

void StreamPrinter::Finish() {
  ClearPartial();
  partial_.clear();
}

}  // namespace waav::cli
