// The generated waav.v1 code compiles, links and behaves: messages survive serialization,
// truncated or corrupt bytes fail to parse (and random damage never crashes), optional fields
// keep their presence, the service has the documented shape, and the .proto files keep the
// API's own rules (every element documented, enum zero values UNSPECIFIED, units in names).
#include <cstdint>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "waav/v1/audio.pb.h"
#include "waav/v1/recognizer.grpc.pb.h"
#include "waav/v1/recognizer.pb.h"

namespace waav::v1 {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::SourceLocation;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::util::MessageDifferencer;

StreamingRecognitionConfig FullStreamingConfig() {
  StreamingRecognitionConfig config;
  RecognitionConfig* recognition = config.mutable_recognition();
  recognition->mutable_audio_format()->set_encoding(AUDIO_ENCODING_LINEAR16);
  recognition->mutable_audio_format()->set_sample_rate_hz(22050);
  recognition->mutable_audio_format()->set_channels(2);
  recognition->set_model("whisper-tiny.en");
  recognition->set_language("en-US");
  recognition->set_enable_word_time_offsets(true);
  recognition->set_max_alternatives(3);
  recognition->set_initial_prompt("Glossary: Kubernetes, gRPC, Grüße.");
  config.set_interim_results(false);
  config.mutable_endpointing()->set_silence_ms(0);  // out of range, but presence must survive
  config.mutable_endpointing()->set_max_utterance_ms(30000);
  config.mutable_endpointing()->set_vad_threshold(0.35f);
  config.mutable_endpointing()->set_min_speech_ms(250);
  config.set_single_utterance(true);
  config.set_request_id("req-42");
  return config;
}

StreamingRecognizeResponse FullResultResponse() {
  StreamingRecognizeResponse response;
  response.set_request_id("req-42");
  response.set_processed_audio_ms(4320);
  StreamingRecognitionResult* result = response.mutable_result();
  result->set_utterance_index(2);
  result->set_is_final(false);
  SpeechRecognitionAlternative* best = result->add_alternatives();
  best->set_transcript("And so, my fellow Americans");
  best->set_confidence(0.0f);
  const char* kWords[] = {"And", "so,", "my", "fellow", "Americans"};
  for (int i = 0; i < 5; ++i) {
    WordInfo* word = best->add_words();
    word->set_word(kWords[i]);
    word->set_start_ms(1000 + 300 * i);
    word->set_end_ms(1250 + 300 * i);
    word->set_confidence(0.5f + 0.1f * i);
    word->set_stable(i < 3);
  }
  result->add_alternatives()->set_transcript("And so my fellow American");
  result->set_stability(0.6f);
  result->set_stable_transcript("And so, my");
  result->set_start_ms(1000);
  result->set_end_ms(2600);
  result->set_language("en");
  ResultLatency* latency = result->mutable_latency();
  latency->set_audio_to_result_ms(412.5f);
  latency->set_server_ms(61.25f);
  latency->set_ingest_wait_ms(0.004f);
  latency->set_frontend_ms(0.3f);
  latency->set_queue_ms(2.0f);
  latency->set_encoder_ms(30.0f);
  latency->set_decoder_ms(25.0f);
  latency->set_processing_ms(0.8f);
  latency->set_decoder_steps(9);
  latency->set_batch_size(17);
  return response;
}

std::vector<StreamingRecognizeResponse> SampleResponses() {
  std::vector<StreamingRecognizeResponse> responses;
  StreamingRecognizeResponse started;
  started.set_request_id("req-42");
  *started.mutable_started()->mutable_effective_config() = FullStreamingConfig();
  ModelInfo* model = started.mutable_started()->mutable_model();
  model->set_name("whisper-tiny.en");
  model->set_family("whisper");
  model->add_languages("en");
  model->set_sample_rate_hz(16000);
  model->set_backend("cpu");
  model->set_loaded(true);
  model->set_streaming(true);
  responses.push_back(started);

  StreamingRecognizeResponse event;
  event.set_request_id("req-42");
  event.set_processed_audio_ms(1300);
  event.mutable_event()->set_type(SpeechEvent::SPEECH_STARTED);
  event.mutable_event()->set_utterance_index(2);
  event.mutable_event()->set_offset_ms(1000);
  event.mutable_event()->set_detected_at_ms(1250);
  responses.push_back(event);

  responses.push_back(FullResultResponse());

  StreamingRecognizeResponse final_result = FullResultResponse();
  StreamingRecognitionResult* result = final_result.mutable_result();
  result->set_is_final(true);
  result->set_stability(1.0f);
  result->set_stable_transcript(result->alternatives(0).transcript());
  result->set_end_reason(UTTERANCE_END_REASON_SILENCE);
  responses.push_back(final_result);
  return responses;
}

RecognizeRequest RandomRecognizeRequest(std::mt19937& rng, size_t audio_bytes) {
  RecognizeRequest request;
  request.mutable_config()->mutable_audio_format()->set_encoding(AUDIO_ENCODING_FLOAT32);
  request.mutable_config()->mutable_audio_format()->set_sample_rate_hz(48000);
  request.set_request_id("file-1");
  std::string audio(audio_bytes, '\0');
  std::uniform_int_distribution<int> byte(0, 255);
  for (char& c : audio) c = static_cast<char>(byte(rng));
  request.set_audio(audio);
  request.mutable_endpointing()->set_silence_ms(800);
  return request;
}

template <typename T>
void ExpectRoundTrip(const T& message) {
  std::string bytes;
  ASSERT_TRUE(message.SerializeToString(&bytes));
  T parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_TRUE(MessageDifferencer::Equals(message, parsed)) << "sent:\n"
                                                           << message.DebugString() << "parsed:\n"
                                                           << parsed.DebugString();
}

// Where each top-level field of a serialized message ends, and 0: the only lengths at which
// a prefix of the bytes is itself a whole message.
std::vector<size_t> FieldBoundaries(const std::string& bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  std::vector<size_t> ends = {0};
  while (uint32_t tag = in.ReadTag()) {
    if (!WireFormatLite::SkipField(&in, tag)) {
      ADD_FAILURE() << "the message's own bytes do not walk";
      break;
    }
    ends.push_back(static_cast<size_t>(in.CurrentPosition()));
  }
  EXPECT_EQ(ends.back(), bytes.size());
  return ends;
}

// Every prefix that cuts a field must fail to parse; prefixes of whole fields must parse.
template <typename T>
void ExpectTruncationsFail(const T& message) {
  std::string bytes;
  ASSERT_TRUE(message.SerializeToString(&bytes));
  const std::vector<size_t> boundaries = FieldBoundaries(bytes);
  google::protobuf::LogSilencer quiet;  // a string cut inside a UTF-8 sequence is logged
  size_t next_boundary = 0;
  for (size_t length = 0; length < bytes.size(); ++length) {
    while (boundaries[next_boundary] < length) ++next_boundary;
    const bool whole_fields = boundaries[next_boundary] == length;
    T parsed;
    EXPECT_EQ(parsed.ParseFromString(bytes.substr(0, length)), whole_fields)
        << T::descriptor()->full_name() << " cut to " << length << " of " << bytes.size()
        << " bytes";
  }
}

TEST(RecognizerProtoTest, StreamingRequestsRoundTrip) {
  StreamingRecognizeRequest config_request;
  *config_request.mutable_config() = FullStreamingConfig();
  ExpectRoundTrip(config_request);
  EXPECT_EQ(config_request.request_case(), StreamingRecognizeRequest::kConfig);

  StreamingRecognizeRequest audio_request;
  audio_request.set_audio(std::string("\x00\x01\xff\x7f\x80", 5));
  ExpectRoundTrip(audio_request);

  // An empty audio chunk is distinguishable from a message with nothing set: the oneof case
  // travels even when the bytes are empty.
  StreamingRecognizeRequest empty_audio;
  empty_audio.set_audio("");
  std::string bytes;
  ASSERT_TRUE(empty_audio.SerializeToString(&bytes));
  StreamingRecognizeRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.request_case(), StreamingRecognizeRequest::kAudio);
  ASSERT_TRUE(parsed.ParseFromString(""));
  EXPECT_EQ(parsed.request_case(), StreamingRecognizeRequest::REQUEST_NOT_SET);
}

TEST(RecognizerProtoTest, StreamingResponsesRoundTrip) {
  for (const StreamingRecognizeResponse& response : SampleResponses()) ExpectRoundTrip(response);
}

TEST(RecognizerProtoTest, RecognizeAndListModelsRoundTrip) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  ExpectRoundTrip(RandomRecognizeRequest(rng, 64000));

  RecognizeResponse response;
  response.set_request_id("file-1");
  response.set_audio_duration_ms(11000);
  response.set_processing_ms(350.5f);
  response.set_model("whisper-tiny.en");
  RecognitionResult* result = response.add_results();
  result->add_alternatives()->set_transcript("ask not what your country can do for you");
  result->set_start_ms(300);
  result->set_end_ms(4100);
  result->set_end_reason(UTTERANCE_END_REASON_END_OF_AUDIO);
  result->set_language("en");
  ExpectRoundTrip(response);

  ListModelsResponse models;
  models.set_default_model("whisper-tiny.en");
  models.set_server_version("0.1.0");
  ModelInfo* model = models.add_models();
  model->set_name("whisper-tiny.en");
  model->add_languages("en");
  model->set_loaded(false);
  ExpectRoundTrip(models);
  ExpectRoundTrip(ListModelsRequest());
}

TEST(RecognizerProtoTest, TruncatedMessagesFailToParse) {
  StreamingRecognizeRequest config_request;
  *config_request.mutable_config() = FullStreamingConfig();
  ExpectTruncationsFail(config_request);
  StreamingRecognizeRequest audio_request;
  audio_request.set_audio(std::string(300, '\x55'));  // a two-byte length prefix
  ExpectTruncationsFail(audio_request);
  for (const StreamingRecognizeResponse& response : SampleResponses()) {
    ExpectTruncationsFail(response);
  }
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  ExpectTruncationsFail(RandomRecognizeRequest(rng, 200));
}

TEST(RecognizerProtoTest, CorruptBytesFailToParse) {
  struct Case {
    const char* what;
    std::string bytes;
  };
  const Case kCases[] = {
      {"audio length past the end", std::string("\x12\x05"
                                                "ab",
                                                4)},
      {"field number 0", std::string("\x00\x01", 2)},
      {"wire type 6", std::string("\x0e\x01", 2)},
      {"wire type 7", std::string("\x0f\x01", 2)},
      {"end-group without a start", std::string("\x0c", 1)},
      {"varint longer than 10 bytes",
       std::string("\x18\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 12)},
      {"config whose nested recognition overruns it", std::string("\x0a\x02\x0a\x05", 4)},
      {"config length past the end", std::string("\x0a\x7f\x0a\x00", 4)},
  };
  for (const Case& c : kCases) {
    StreamingRecognizeRequest request;
    EXPECT_FALSE(request.ParseFromString(c.bytes)) << c.what;
  }
  // proto3 strings must be UTF-8: a request_id of raw bytes is refused while parsing.
  google::protobuf::LogSilencer quiet;
  StreamingRecognizeResponse response;
  EXPECT_FALSE(response.ParseFromString(std::string("\x0a\x02\xff\xfe", 4)));
}

TEST(RecognizerProtoTest, UnknownFieldsFromNewerPeersAreKept) {
  // Field 15 of StreamingRecognizeResponse does not exist yet; a newer server may send it.
  std::string bytes;
  ASSERT_TRUE(FullResultResponse().SerializeToString(&bytes));
  bytes += std::string("\x78\x2a", 2);  // field 15, varint 42
  StreamingRecognizeResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  // Passing it on (a proxy, a recorder) keeps the unknown field.
  std::string again;
  ASSERT_TRUE(parsed.SerializeToString(&again));
  EXPECT_EQ(again, bytes);
  // The known fields read as before.
  EXPECT_EQ(parsed.GetReflection()->GetUnknownFields(parsed).field_count(), 1);
  parsed.GetReflection()->MutableUnknownFields(&parsed)->Clear();
  EXPECT_TRUE(MessageDifferencer::Equals(parsed, FullResultResponse()));
}

TEST(RecognizerProtoTest, RandomDamageNeverCrashes) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::vector<std::string> originals;
  for (const StreamingRecognizeResponse& response : SampleResponses()) {
    originals.push_back(response.SerializeAsString());
  }
  StreamingRecognizeRequest config_request;
  *config_request.mutable_config() = FullStreamingConfig();
  originals.push_back(config_request.SerializeAsString());

  google::protobuf::util::DefaultFieldComparator nan_equal;
  nan_equal.set_treat_nan_as_equal(true);
  google::protobuf::LogSilencer quiet;  // damaged UTF-8 is logged by protobuf as it is refused
  int parsed_count = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::string bytes = originals[rng() % originals.size()];
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    StreamingRecognizeResponse response;
    StreamingRecognizeRequest request;
    for (google::protobuf::Message* message : {static_cast<google::protobuf::Message*>(&response),
                                               static_cast<google::protobuf::Message*>(&request)}) {
      if (!message->ParseFromString(bytes)) continue;
      ++parsed_count;
      // Whatever parsed is a valid message: it serializes and reads back identically.
      std::string again;
      ASSERT_TRUE(message->SerializeToString(&again)) << "trial " << trial;
      std::unique_ptr<google::protobuf::Message> reparsed(message->New());
      ASSERT_TRUE(reparsed->ParseFromString(again)) << "trial " << trial;
      std::string difference;
      MessageDifferencer differencer;
      differencer.set_field_comparator(&nan_equal);  // a flipped float may well be NaN
      differencer.ReportDifferencesToString(&difference);
      EXPECT_TRUE(differencer.Compare(*message, *reparsed))
          << "trial " << trial << ": " << difference;
    }
  }
  // Not an assertion on the exact share: only that both outcomes were exercised.
  EXPECT_GT(parsed_count, 0);
  EXPECT_LT(parsed_count, 8000);
}

TEST(RecognizerProtoTest, OptionalFieldsKeepPresence) {
  EndpointingConfig endpointing;
  EXPECT_FALSE(endpointing.has_silence_ms());
  EXPECT_FALSE(endpointing.has_vad_threshold());
  endpointing.set_silence_ms(0);
  endpointing.set_vad_threshold(0.0f);
  EndpointingConfig parsed;
  ASSERT_TRUE(parsed.ParseFromString(endpointing.SerializeAsString()));
  EXPECT_TRUE(parsed.has_silence_ms());
  EXPECT_EQ(parsed.silence_ms(), 0u);
  EXPECT_TRUE(parsed.has_vad_threshold());
  EXPECT_FALSE(parsed.has_max_utterance_ms());
  EXPECT_FALSE(parsed.has_min_speech_ms());

  StreamingRecognitionConfig config;
  EXPECT_FALSE(config.has_interim_results());  // unset: the server's default (true) applies
  config.set_interim_results(false);
  StreamingRecognitionConfig parsed_config;
  ASSERT_TRUE(parsed_config.ParseFromString(config.SerializeAsString()));
  EXPECT_TRUE(parsed_config.has_interim_results());
  EXPECT_FALSE(parsed_config.interim_results());
}

TEST(RecognizerProtoTest, ServiceHasTheDocumentedShape) {
  EXPECT_STREQ(Recognizer::service_full_name(), "waav.v1.Recognizer");
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName("waav.v1.Recognizer");
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(service->method_count(), 3);
  const auto* streaming = service->FindMethodByName("StreamingRecognize");
  ASSERT_NE(streaming, nullptr);
  EXPECT_TRUE(streaming->client_streaming());
  EXPECT_TRUE(streaming->server_streaming());
  EXPECT_EQ(streaming->input_type(), StreamingRecognizeRequest::descriptor());
  EXPECT_EQ(streaming->output_type(), StreamingRecognizeResponse::descriptor());
  for (const char* unary : {"Recognize", "ListModels"}) {
    const auto* method = service->FindMethodByName(unary);
    ASSERT_NE(method, nullptr) << unary;
    EXPECT_FALSE(method->client_streaming()) << unary;
    EXPECT_FALSE(method->server_streaming()) << unary;
  }
  // The stubs and the callback service link; creating a channel does not connect.
  auto channel = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  std::unique_ptr<Recognizer::Stub> stub = Recognizer::NewStub(channel);
  EXPECT_NE(stub, nullptr);
  Recognizer::CallbackService service_base;
  (void)service_base;
}

// The API's own rules, checked on the .proto sources (through the descriptor set protoc wrote
// with their comments).
class ProtoSourceTest : public testing::Test {
 protected:
  void SetUp() override {
    std::ifstream in(WAAV_PROTOSET_PATH, std::ios::binary);
    ASSERT_TRUE(in) << "cannot open " << WAAV_PROTOSET_PATH;
    std::stringstream buffer;
    buffer << in.rdbuf();
    google::protobuf::FileDescriptorSet set;
    ASSERT_TRUE(set.ParseFromString(buffer.str())) << WAAV_PROTOSET_PATH;
    for (const auto& file : set.file()) {  // dependencies come first
      const google::protobuf::FileDescriptor* built = pool_.BuildFile(file);
      ASSERT_NE(built, nullptr) << file.name();
      if (built->package() == "waav.v1") files_.push_back(built);
    }
    ASSERT_EQ(files_.size(), 2u);
  }

  template <typename D>
  void ExpectDocumented(const D* d) {
    SourceLocation location;
    ASSERT_TRUE(d->GetSourceLocation(&location)) << d->full_name();
    const bool documented =
        location.leading_comments.find_first_not_of(" \n") != std::string::npos ||
        location.trailing_comments.find_first_not_of(" \n") != std::string::npos;
    EXPECT_TRUE(documented) << d->full_name() << " has no comment";
    ++checked_;
  }

  void CheckEnum(const google::protobuf::EnumDescriptor* e) {
    ExpectDocumented(e);
    const std::string zero = e->FindValueByNumber(0)->name();
    EXPECT_TRUE(zero.size() >= 11 && zero.compare(zero.size() - 11, 11, "UNSPECIFIED") == 0)
        << e->full_name() << ": value 0 is " << zero;
    for (int i = 0; i < e->value_count(); ++i) ExpectDocumented(e->value(i));
  }

  void CheckMessage(const Descriptor* m) {
    ExpectDocumented(m);
    for (int i = 0; i < m->field_count(); ++i) {
      const FieldDescriptor* field = m->field(i);
      ExpectDocumented(field);
      CheckUnits(field);
    }
    for (int i = 0; i < m->oneof_decl_count(); ++i) {
      // proto3 `optional` fields sit in synthetic oneofs that have no source of their own.
      if (!m->oneof_decl(i)->is_synthetic()) ExpectDocumented(m->oneof_decl(i));
    }
    for (int i = 0; i < m->nested_type_count(); ++i) CheckMessage(m->nested_type(i));
    for (int i = 0; i < m->enum_type_count(); ++i) CheckEnum(m->enum_type(i));
  }

  // A number that measures time or rate says its unit in its name.
  static void CheckUnits(const FieldDescriptor* field) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING ||
        field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE ||
        field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL ||
        field->cpp_type() == FieldDescriptor::CPPTYPE_ENUM) {
      return;
    }
    const std::string& name = field->name();
    auto ends_with = [&](const char* suffix) {
      const std::string s(suffix);
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with("_ms") || ends_with("_hz")) return;
    for (const char* timeish : {"time", "duration", "offset", "latency", "timeout", "rate"}) {
      EXPECT_EQ(name.find(timeish), std::string::npos)
          << field->full_name() << " looks like a time or rate but has no unit suffix";
    }
  }

  google::protobuf::DescriptorPool pool_;
  std::vector<const google::protobuf::FileDescriptor*> files_;
  int checked_ = 0;
};

TEST_F(ProtoSourceTest, EveryElementIsDocumentedAndFollowsTheRules) {
  for (const google::protobuf::FileDescriptor* file : files_) {
    for (int i = 0; i < file->message_type_count(); ++i) CheckMessage(file->message_type(i));
    for (int i = 0; i < file->enum_type_count(); ++i) CheckEnum(file->enum_type(i));
    for (int i = 0; i < file->service_count(); ++i) {
      ExpectDocumented(file->service(i));
      for (int j = 0; j < file->service(i)->method_count(); ++j) {
        ExpectDocumented(file->service(i)->method(j));
      }
    }
  }
  EXPECT_GT(checked_, 100);  // the walk reached the whole API
}

}  // namespace
}  // namespace waav::v1
