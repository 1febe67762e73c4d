#include "tests/integration/stream_client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace waav::testing {
namespace {

constexpr bool kCheckStableWordTimes = true;

}  // namespace

std::vector<v1::StreamingRecognitionResult> StreamRun::Finals() const {
  std::vector<v1::StreamingRecognitionResult> finals;
  for (const Received& r : responses) {
    if (r.response.has_result() && r.response.result().is_final()) {
      finals.push_back(r.response.result());
    }
  }
  return finals;
}

std::string StreamRun::FinalText() const {
  std::string text;
  for (const auto& f : Finals()) {
    const std::string& t = f.alternatives(0).transcript();
    if (t.empty()) continue;
    if (!text.empty()) text += " ";
    text += t;
  }
  return text;
}

int StreamRun::CountEvents(v1::SpeechEvent::Type type) const {
  int n = 0;
  for (const Received& r : responses)
    n += r.response.has_event() && r.response.event().type() == type;
  return n;
}

int StreamRun::CountResults() const {
  int n = 0;
  for (const Received& r : responses) n += r.response.has_result();
  return n;
}

StreamRun RunStream(v1::Recognizer::Stub& stub, const StreamPlan& plan) {
  StreamRun run;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(plan.deadline_s));
  auto stream = stub.StreamingRecognize(&context);
  std::atomic<double> sent_ms{0};

  std::thread writer([&] {
    if (plan.send_config) {
      v1::StreamingRecognizeRequest request;
      *request.mutable_config() = plan.config;
      if (!stream->Write(request)) return;
    }
    const auto start = std::chrono::steady_clock::now();
    for (size_t offset = 0; offset < plan.audio.size(); offset += plan.chunk_bytes) {
      const size_t n = std::min(plan.chunk_bytes, plan.audio.size() - offset);
      const double end_ms = static_cast<double>(offset + n) / plan.bytes_per_ms;
      if (plan.pace > 0) {
        // A chunk is sent once the audio it holds would have been spoken.
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double, std::milli>(end_ms / plan.pace)));
      }
      v1::StreamingRecognizeRequest request;
      request.set_audio(plan.audio.substr(offset, n));
      if (!stream->Write(request)) return;
      sent_ms.store(end_ms);
      if (plan.cancel_after_ms && end_ms >= *plan.cancel_after_ms) {
        context.TryCancel();
        return;
      }
    }
    if (plan.half_close) stream->WritesDone();
  });

  v1::StreamingRecognizeResponse response;
  while (stream->Read(&response)) {
    run.responses.push_back({response, sent_ms.load()});
  }
  writer.join();
  run.status = stream->Finish();
  run.sent_ms = sent_ms.load();
  return run;
}

v1::StreamingRecognitionConfig Linear16Config(int rate_hz, const std::string& request_id) {
  v1::StreamingRecognitionConfig config;
  v1::RecognitionConfig* recognition = config.mutable_recognition();
  recognition->mutable_audio_format()->set_encoding(v1::AUDIO_ENCODING_LINEAR16);
  recognition->mutable_audio_format()->set_sample_rate_hz(static_cast<uint32_t>(rate_hz));
  recognition->set_enable_word_time_offsets(true);
  config.set_request_id(request_id);
  return config;
}

std::string ToLinear16(const std::vector<float>& samples) {
  std::string bytes(samples.size() * 2, '\0');
  for (size_t i = 0; i < samples.size(); ++i) {
    const float clipped = std::clamp(samples[i], -1.0f, 1.0f);
    const auto v = static_cast<int16_t>(std::lrint(clipped * 32767.0f));
    bytes[2 * i] = static_cast<char>(v & 0xff);
    bytes[2 * i + 1] = static_cast<char>((v >> 8) & 0xff);
  }
  return bytes;
}

std::string CheckStreamContract(const StreamRun& run, const std::string& request_id) {
  if (run.responses.empty()) return "no response at all";
  if (!run.responses.front().response.has_started())
    return "the first response is not StreamStarted";
  uint32_t processed = 0;
  struct Utterance {
    std::string stable;
    bool final_seen = false;
    bool ended = false;
    bool any_result = false;
    std::vector<v1::WordInfo> stable_words;
  };
  std::map<uint32_t, Utterance> utterances;
  bool in_speech = false;
  int64_t highest_final = -1;
  for (size_t i = 0; i < run.responses.size(); ++i) {
    const v1::StreamingRecognizeResponse& r = run.responses[i].response;
    const std::string where = absl::StrCat("response ", i, ": ");
    if (i > 0 && r.has_started()) return where + "a second StreamStarted";
    if (!request_id.empty() && r.request_id() != request_id) {
      return where + "request_id '" + r.request_id() + "' is not '" + request_id + "'";
    }
    if (r.processed_audio_ms() < processed) return where + "processed_audio_ms went down";
    processed = r.processed_audio_ms();
    if (r.has_event()) {
      const v1::SpeechEvent& e = r.event();
      if (e.detected_at_ms() < e.offset_ms()) return where + "detected_at_ms < offset_ms";
      if (e.type() == v1::SpeechEvent::SPEECH_STARTED) {
        if (in_speech) return where + "SPEECH_STARTED twice in a row";
        in_speech = true;
      } else if (e.type() == v1::SpeechEvent::SPEECH_ENDED) {
        if (!in_speech) return where + "SPEECH_ENDED without SPEECH_STARTED";
        in_speech = false;
        utterances[e.utterance_index()].ended = true;
      }
      continue;
    }
    if (!r.has_result()) continue;
    const v1::StreamingRecognitionResult& result = r.result();
    if (result.alternatives_size() < 1) return where + "a result without alternatives";
    if (static_cast<int64_t>(result.utterance_index()) <= highest_final) {
      return where + absl::StrCat("a result for utterance ", result.utterance_index(),
                                  " after its final (or a later utterance's)");
    }
    Utterance& u = utterances[result.utterance_index()];
    u.any_result = true;
    const std::string& transcript = result.alternatives(0).transcript();
    if (!absl::StartsWith(transcript, result.stable_transcript())) {
      return where + "stable_transcript '" + result.stable_transcript() + "' is not a prefix of '" +
             transcript + "'";
    }
    if (!absl::StartsWith(transcript, u.stable)) {
      return where + "stable text '" + u.stable + "' was withdrawn in '" + transcript + "'";
    }
    if (result.stable_transcript().size() < u.stable.size()) return where + "stable text shrank";
    u.stable = result.stable_transcript();
    // Stable words keep their text (and, by the API, their confidence, and their offsets in
    // interim results: see kCheckStableWordTimes) in every later result.
    const auto& words = result.alternatives(0).words();
    if (!words.empty() || !u.stable_words.empty()) {
      if (words.size() < static_cast<int>(u.stable_words.size())) {
        return where + "fewer words than were stable before";
      }
      for (size_t w = 0; w < u.stable_words.size(); ++w) {
        const v1::WordInfo& was = u.stable_words[w];
        const v1::WordInfo& now = words[static_cast<int>(w)];
        if (was.word() != now.word() || !now.stable()) {
          return where + "stable word '" + was.word() + "' became '" + now.word() + "'";
        }
        // A final's offsets are aligned to the audio and replace the interim estimates.
        if (kCheckStableWordTimes && !result.is_final() &&
            (was.start_ms() != now.start_ms() || was.end_ms() != now.end_ms())) {
          return where + absl::StrCat("stable word '", was.word(), "' moved from ", was.start_ms(),
                                      "-", was.end_ms(), " to ", now.start_ms(), "-", now.end_ms(),
                                      " ms");
        }
      }
      u.stable_words.clear();
      for (const v1::WordInfo& w : words) {
        if (w.stable()) u.stable_words.push_back(w);
      }
    }
    if (result.is_final()) {
      if (!u.ended && result.end_reason() != v1::UTTERANCE_END_REASON_MAX_LENGTH) {
        return where + absl::StrCat("final of utterance ", result.utterance_index(),
                                    " before its SPEECH_ENDED");
      }
      if (result.stability() != 1.0f) return where + "a final with stability != 1";
      highest_final = result.utterance_index();
      u.final_seen = true;
    } else if (u.ended) {
      return where + "an interim result after SPEECH_ENDED";
    }
  }
  if (in_speech && run.status.ok()) return "the stream ended OK during speech without SPEECH_ENDED";
  for (const auto& [index, u] : utterances) {
    if (u.any_result && !u.final_seen && run.status.ok()) {
      return absl::StrCat("utterance ", index, " has results but no final");
    }
  }
  return "";
}

}  // namespace waav::testing
