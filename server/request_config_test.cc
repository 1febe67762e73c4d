#include "server/request_config.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace waav::server {
namespace {

class RequestConfigTest : public ::testing::Test {
 protected:
  RequestConfigTest() {
    model_.name = "whisper-tiny.en";
    model_.languages = {"en"};
    model_.backend = "cpu";
    auto* format = config_.mutable_recognition()->mutable_audio_format();
    format->set_encoding(v1::AUDIO_ENCODING_LINEAR16);
    format->set_sample_rate_hz(16000);
  }

  absl::StatusOr<StreamSetup> Resolve() { return ResolveStreamingConfig(config_, server_, model_); }
  void ExpectError(absl::StatusCode code, const std::string& part) {
    const auto setup = Resolve();
    EXPECT_EQ(setup.status().code(), code) << config_.ShortDebugString();
    EXPECT_TRUE(absl::StrContains(setup.status().message(), part)) << setup.status();
    config_ = v1::StreamingRecognitionConfig();
    auto* format = config_.mutable_recognition()->mutable_audio_format();
    format->set_encoding(v1::AUDIO_ENCODING_LINEAR16);
    format->set_sample_rate_hz(16000);
  }

  ServerConfig server_;
  ModelDescription model_;
  v1::StreamingRecognitionConfig config_;
};

TEST_F(RequestConfigTest, EveryDefaultIsFilledIn) {
  const auto setup = Resolve();
  ASSERT_TRUE(setup.ok()) << setup.status();
  const v1::StreamingRecognitionConfig& e = setup->effective;
  EXPECT_EQ(e.recognition().model(), "whisper-tiny.en");
  EXPECT_EQ(e.recognition().language(), "en");
  EXPECT_EQ(e.recognition().max_alternatives(), 1u);
  EXPECT_EQ(e.recognition().audio_format().channels(), 1u);
  EXPECT_TRUE(e.has_interim_results() && e.interim_results());
  EXPECT_EQ(e.endpointing().silence_ms(), 500u);
  EXPECT_EQ(e.endpointing().max_utterance_ms(), 30000u);
  EXPECT_FLOAT_EQ(e.endpointing().vad_threshold(), 0.5f);
  EXPECT_EQ(e.endpointing().min_speech_ms(), 250u);
  EXPECT_EQ(e.request_id().size(), 16u);  // generated
  EXPECT_EQ(setup->request_id, e.request_id());
  EXPECT_EQ(setup->options.endpoint.silence_ms, 500);
  EXPECT_FLOAT_EQ(setup->options.endpoint.hysteresis, 0.15f);
  EXPECT_EQ(setup->options.endpoint.cold_start_pad_ms, 400);
  EXPECT_TRUE(setup->options.Validate().ok());
}

TEST_F(RequestConfigTest, ClientValuesAreAppliedAndClamped) {
  config_.set_interim_results(false);
  config_.set_single_utterance(true);
  config_.set_request_id("abc");
  config_.mutable_recognition()->set_language("EN-us");
  config_.mutable_recognition()->set_initial_prompt("Kennedy");
  config_.mutable_endpointing()->set_silence_ms(800);
  config_.mutable_endpointing()->set_max_utterance_ms(120000);
  config_.mutable_endpointing()->set_vad_threshold(0.1f);
  config_.mutable_endpointing()->set_min_speech_ms(0);
  const auto setup = Resolve();
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_FALSE(setup->options.interim_results);
  EXPECT_TRUE(setup->options.single_utterance);
  EXPECT_EQ(setup->request_id, "abc");
  EXPECT_EQ(setup->language, "en");
  EXPECT_EQ(setup->options.initial_prompt, "Kennedy");
  EXPECT_EQ(setup->options.endpoint.silence_ms, 800);
  // The engine decodes one 30 s window; the effective config says what applies.
  EXPECT_EQ(setup->options.endpoint.max_utterance_ms, 30000);
  EXPECT_EQ(setup->effective.endpointing().max_utterance_ms(), 30000u);
  // Hysteresis keeps the "off" threshold at 0.01 at least.
  EXPECT_NEAR(setup->options.endpoint.threshold - setup->options.endpoint.hysteresis, 0.01f, 1e-6);
  EXPECT_TRUE(setup->options.Validate().ok()) << setup->options.Validate();
}

TEST_F(RequestConfigTest, ContainerFormatsTakeTheirRateFromTheHeader) {
  auto* format = config_.mutable_recognition()->mutable_audio_format();
  format->set_encoding(v1::AUDIO_ENCODING_OGG_OPUS);
  format->set_sample_rate_hz(0);
  const auto setup = Resolve();
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->format.encoding, audio::AudioEncoding::kOggOpus);
  EXPECT_EQ(setup->format.sample_rate_hz, 0);
}

TEST_F(RequestConfigTest, BadConfigsNameTheField) {
  config_.clear_recognition();
  ExpectError(absl::StatusCode::kInvalidArgument, "config.recognition is missing");
  config_.mutable_recognition()->clear_audio_format();
  ExpectError(absl::StatusCode::kInvalidArgument, "audio_format is missing");
  config_.mutable_recognition()->mutable_audio_format()->set_encoding(
      v1::AUDIO_ENCODING_UNSPECIFIED);
  ExpectError(absl::StatusCode::kInvalidArgument, "UNSPECIFIED");
  config_.mutable_recognition()->mutable_audio_format()->set_encoding(
      static_cast<v1::AudioEncoding>(7));
  ExpectError(absl::StatusCode::kInvalidArgument, "encoding 7");
  config_.mutable_recognition()->mutable_audio_format()->set_sample_rate_hz(7999);
  ExpectError(absl::StatusCode::kInvalidArgument, "sample_rate_hz 7999");
  config_.mutable_recognition()->mutable_audio_format()->set_sample_rate_hz(192001);
  ExpectError(absl::StatusCode::kInvalidArgument, "[8000, 192000]");
  config_.mutable_recognition()->mutable_audio_format()->set_encoding(v1::AUDIO_ENCODING_FLAC);
  config_.mutable_recognition()->mutable_audio_format()->set_sample_rate_hz(100);
  ExpectError(absl::StatusCode::kInvalidArgument, "or 0 (taken from the stream header)");
  config_.mutable_recognition()->mutable_audio_format()->set_channels(9);
  ExpectError(absl::StatusCode::kInvalidArgument, "audio_format.channels");
  config_.mutable_recognition()->set_model("whisper-large");
  ExpectError(absl::StatusCode::kNotFound, "it has: whisper-tiny.en");
  config_.mutable_recognition()->set_language("fr");
  ExpectError(absl::StatusCode::kInvalidArgument, "language 'fr'");
  config_.mutable_recognition()->set_max_alternatives(11);
  ExpectError(absl::StatusCode::kInvalidArgument, "max_alternatives");
  config_.mutable_recognition()->set_initial_prompt(std::string(1025, 'a'));
  ExpectError(absl::StatusCode::kInvalidArgument, "initial_prompt is 1025 bytes");
  config_.mutable_endpointing()->set_silence_ms(10001);
  ExpectError(absl::StatusCode::kInvalidArgument, "endpointing.silence_ms");
  config_.mutable_endpointing()->set_max_utterance_ms(999);
  ExpectError(absl::StatusCode::kInvalidArgument, "endpointing.max_utterance_ms");
  config_.mutable_endpointing()->set_vad_threshold(0.0f);
  ExpectError(absl::StatusCode::kInvalidArgument, "endpointing.vad_threshold");
  config_.mutable_endpointing()->set_vad_threshold(std::nanf(""));
  ExpectError(absl::StatusCode::kInvalidArgument, "endpointing.vad_threshold");
  config_.mutable_endpointing()->set_min_speech_ms(5001);
  ExpectError(absl::StatusCode::kInvalidArgument, "endpointing.min_speech_ms");
  config_.set_request_id(std::string(129, 'x'));
  ExpectError(absl::StatusCode::kInvalidArgument, "request_id has 129 characters");
  config_.set_request_id("caf\xc3\xa9");
  ExpectError(absl::StatusCode::kInvalidArgument, "0xc3 at position 3");
}

TEST_F(RequestConfigTest, RequestIdsAreGeneratedFresh) {
  const auto a = ResolveRequestId("");
  const auto b = ResolveRequestId("");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*ResolveRequestId("~ printable ~"), "~ printable ~");
}

TEST_F(RequestConfigTest, RecognizeRequests) {
  v1::RecognizeRequest request;
  *request.mutable_config() = config_.recognition();
  request.set_audio("xx");
  const auto setup = ResolveRecognizeRequest(request, server_, model_);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->language, "en");
  request.clear_audio();
  EXPECT_EQ(ResolveRecognizeRequest(request, server_, model_).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.set_audio("xx");
  request.mutable_endpointing()->set_silence_ms(1);
  EXPECT_EQ(ResolveRecognizeRequest(request, server_, model_).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.clear_config();
  EXPECT_EQ(ResolveRecognizeRequest(request, server_, model_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace waav::server
