#include "server/recognizer_service.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/offline_recognizer.h"
#include "server/status_mapping.h"
#include "server/stream_reactor.h"
#include "spdlog/spdlog.h"

namespace waav::server {

grpc::ServerBidiReactor<v1::StreamingRecognizeRequest, v1::StreamingRecognizeResponse>*
RecognizerService::StreamingRecognize(grpc::CallbackServerContext* context) {
  return NewStreamReactor(runtime_, context, next_serial_.fetch_add(1));
}

grpc::ServerUnaryReactor* RecognizerService::Recognize(grpc::CallbackServerContext* context,
                                                       const v1::RecognizeRequest* request,
                                                       v1::RecognizeResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const auto start = std::chrono::steady_clock::now();
  const uint64_t serial = next_serial_.fetch_add(1);
  if (runtime_.state->draining() || !runtime_.state->loaded()) {
    runtime_.metrics->rejections(runtime_.state->draining() ? "draining" : "overload").Inc();
    reactor->Finish(ToGrpcStatus(
        absl::UnavailableError(runtime_.state->draining()
                                   ? "the server is shutting down; retry on another instance"
                                   : "the server is still loading its models; retry shortly"),
        request->request_id()));
    return reactor;
  }
  absl::StatusOr<OfflineSetup> setup =
      ResolveRecognizeRequest(*request, *runtime_.config, *runtime_.model);
  if (!setup.ok()) {
    reactor->Finish(ToGrpcStatus(setup.status(), request->request_id()));
    return reactor;
  }
  const ServiceRuntime* runtime = &runtime_;
  const std::string peer = context->peer();
  auto job = [runtime, context, request, response, reactor, setup = *setup, start, serial,
              peer](const whisper::Transcriber* transcriber) {
    absl::Status status;
    if (transcriber == nullptr) {
      status = absl::UnavailableError("the server shut down before the request ran");
    } else if (context->IsCancelled()) {
      status = absl::CancelledError("the client cancelled the request");
    } else {
      response->set_request_id(setup.request_id);
      response->set_model(runtime->model->name);
      status = RunRecognize(*transcriber, *request, setup, runtime->config->max_stream_duration_s,
                            response);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    response->set_processing_ms(static_cast<float>(seconds * 1e3));
    const grpc::Status grpc_status = ToGrpcStatus(status, setup.request_id);
    const double audio_s = response->audio_duration_ms() / 1e3;
    if (status.ok()) runtime->metrics->audio_seconds().Add(audio_s);
    spdlog::info(
        "recognize {} end: request_id={} peer={} duration_s={:.3f} audio_s={:.3f} status={}{}{}",
        serial, setup.request_id, peer, seconds, audio_s, StatusCodeName(grpc_status.error_code()),
        status.ok() ? "" : " ", grpc_status.error_message());
    reactor->Finish(grpc_status);
  };
  if (!runtime_.offline->Submit(std::move(job))) {
    runtime_.metrics->rejections("overload").Inc();
    reactor->Finish(ToGrpcStatus(
        absl::ResourceExhaustedError(absl::StrCat("the server's Recognize queue is full (",
                                                  runtime_.config->max_queued_recognize,
                                                  " waiting); retry later with backoff")),
        setup->request_id));
  }
  return reactor;
}

grpc::ServerUnaryReactor* RecognizerService::ListModels(grpc::CallbackServerContext* context,
                                                        const v1::ListModelsRequest* /*request*/,
                                                        v1::ListModelsResponse* response) {
  *response->add_models() = runtime_.model->ToProto(runtime_.state->loaded());
  response->set_default_model(runtime_.model->name);
  response->set_server_version(server_version_);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace waav::server
