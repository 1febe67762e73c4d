// waav.v1.Recognizer with gRPC's callback API: StreamingRecognize gets one StreamReactor per
// call; Recognize runs on the offline workers (never on a gRPC thread); ListModels answers at
// once.
#pragma once

#include <atomic>
#include <cstdint>

#include "server/service_runtime.h"
#include "waav/v1/recognizer.grpc.pb.h"

namespace waav::server {

class RecognizerService final : public v1::Recognizer::CallbackService {
 public:
  // `runtime` must outlive the service; `server_version` is what ListModels reports.
  RecognizerService(const ServiceRuntime& runtime, std::string server_version)
      : runtime_(runtime), server_version_(std::move(server_version)) {}

  grpc::ServerBidiReactor<v1::StreamingRecognizeRequest, v1::StreamingRecognizeResponse>*
  StreamingRecognize(grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* Recognize(grpc::CallbackServerContext* context,
                                      const v1::RecognizeRequest* request,
                                      v1::RecognizeResponse* response) override;

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;

 private:
  const ServiceRuntime& runtime_;
  const std::string server_version_;
  std::atomic<uint64_t> next_serial_{1};
};

}  // namespace waav::server
