// How `waav stream` draws partials in place, prints finals, and writes JSON lines.
#include "tools/waav/stream_printer.h"

#include <sstream>

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace waav::cli {
namespace {

v1::StreamingRecognizeResponse Result(const std::string& text, const std::string& stable,
                                      bool final, uint32_t utterance = 0) {
  v1::StreamingRecognizeResponse r;
  r.set_request_id("rid");
  r.set_processed_audio_ms(1234);
  v1::StreamingRecognitionResult* result = r.mutable_result();
  result->set_is_final(final);
  result->set_utterance_index(utterance);
  result->add_alternatives()->set_transcript(text);
  result->set_stable_transcript(stable);
  result->set_start_ms(100);
  result->set_end_ms(900);
  return r;
}

v1::StreamingRecognizeResponse Event(v1::SpeechEvent::Type type) {
  v1::StreamingRecognizeResponse r;
  r.mutable_event()->set_type(type);
  r.mutable_event()->set_offset_ms(250);
  r.mutable_event()->set_detected_at_ms(500);
  return r;
}

TEST(StreamPrinterTest, PipeGetsFinalsOnly) {
  std::ostringstream out, err;
  StreamPrinter printer(out, err, {});
  printer.OnResponse(Event(v1::SpeechEvent::SPEECH_STARTED));
  printer.OnResponse(Result("And so", "And", false));
  printer.OnResponse(Result("And so my fellow", "And so", false));
  printer.OnResponse(Result("And so, my fellow Americans.", "And so, my fellow Americans.", true));
  printer.OnResponse(Result("", "", true, 1));  // an empty final prints nothing
  printer.OnResponse(Result("Ask not.", "Ask not.", true, 2));
  printer.Finish();
  EXPECT_EQ(out.str(), "And so, my fellow Americans.\nAsk not.\n");
  EXPECT_EQ(err.str(), "");
  EXPECT_EQ(printer.finals(), 3);
  EXPECT_EQ(printer.request_id(), "rid");
}

TEST(StreamPrinterTest, TerminalRedrawsThePartialInPlaceWithItsTailDimmed) {
  std::ostringstream out, err;
  StreamPrinterOptions options;
  options.terminal = true;
  options.width = 80;
  StreamPrinter printer(out, err, options);
  printer.OnResponse(Result("And so my", "And so", false));
  printer.OnResponse(Result("And so, my fellow Americans.", "And so, my fellow Americans.", true));
  printer.OnResponse(Result("Ask", "", false, 1));
  printer.Finish();  // the stream ended mid-utterance: the partial is wiped
  EXPECT_EQ(out.str(),
            "\r\x1b[KAnd so\x1b[2m my\x1b[0m"
            "\r\x1b[KAnd so, my fellow Americans.\n"
            "\r\x1b[K\x1b[2mAsk\x1b[0m"
            "\r\x1b[K");
}

TEST(StreamPrinterTest, VerboseEventsGoToStderrWithoutGarblingThePartial) {
  std::ostringstream out, err;
  StreamPrinterOptions options;
  options.terminal = true;
  options.verbose = true;
  StreamPrinter printer(out, err, options);
  printer.OnResponse(Result("Hello", "Hello", false));
  printer.OnResponse(Event(v1::SpeechEvent::SPEECH_ENDED));
  // Cleared before the event line, drawn again after it.
  EXPECT_EQ(out.str(), "\r\x1b[KHello\r\x1b[K\r\x1b[KHello");
  EXPECT_EQ(err.str(), "waav: SPEECH_ENDED, utterance 0, at 0.25 s (detected at 0.50 s)\n");
}

TEST(StreamPrinterTest, LongPartialsShowTheirEndWithinTheWidth) {
  size_t stable = 0;
  EXPECT_EQ(StreamPrinter::FitPartial("short", 3, 20, &stable), "short");
  EXPECT_EQ(stable, 3u);
  // 19 code points fit in width 20; longer keeps the last 18 after an ellipsis.
  const std::string text = "abcdefghijklmnopqrstuvwxyz";
  const std::string fit = StreamPrinter::FitPartial(text, 24, 20, &stable);
  EXPECT_EQ(fit, "\xE2\x80\xA6ijklmnopqrstuvwxyz");
  EXPECT_EQ(stable, 3u + 16u);  // the ellipsis and "ijklmnopqrstuvwx"
  StreamPrinter::FitPartial(text, 4, 20, &stable);
  EXPECT_EQ(stable, 0u);  // the stable part scrolled off
  // Multi-byte characters are never split.
  const std::string accents =
      "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9"
      "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9";  // 12 x U+00E9
  EXPECT_EQ(StreamPrinter::FitPartial(accents, 0, 11, &stable),
            "\xE2\x80\xA6\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9");
}

TEST(StreamPrinterTest, JsonLinesParseBackIntoTheResponses) {
  std::ostringstream out, err;
  StreamPrinterOptions options;
  options.json = true;
  options.terminal = true;  // JSON is never drawn in place
  StreamPrinter printer(out, err, options);
  std::vector<v1::StreamingRecognizeResponse> sent = {Event(v1::SpeechEvent::SPEECH_STARTED),
                                                      Result("Hi \"there\"\n", "Hi", false),
                                                      Result("Hi there.", "Hi there.", true)};
  v1::WordInfo* word = sent[2].mutable_result()->mutable_alternatives(0)->add_words();
  word->set_word("Hi");
  word->set_end_ms(400);
  word->set_stable(true);
  sent[0].mutable_started();  // oneof: the event is replaced; a StreamStarted line
  sent[0].mutable_started()->mutable_model()->set_name("m");
  for (const auto& r : sent) printer.OnResponse(r);
  std::istringstream lines(out.str());
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    ASSERT_LT(i, sent.size());
    EXPECT_EQ(line.find('\r'), std::string::npos);
    v1::StreamingRecognizeResponse parsed;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &parsed).ok()) << line;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, sent[i])) << line;
    ++i;
  }
  EXPECT_EQ(i, sent.size());
  // Field names as in the .proto, and defaults printed so every line has the same keys.
  EXPECT_NE(out.str().find("\"processed_audio_ms\""), std::string::npos);
  EXPECT_NE(out.str().find("\"is_final\":false"), std::string::npos);
}

}  // namespace
}  // namespace waav::cli
