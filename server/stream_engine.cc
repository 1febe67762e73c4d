#include "server/stream_engine.h"

namespace waav::server {
namespace {

class StreamingEngineAdapter final : public StreamEngine {
 public:
  explicit StreamingEngineAdapter(std::unique_ptr<streaming::StreamingEngine> engine)
      : engine_(std::move(engine)) {}

  absl::StatusOr<uint64_t> OpenStream(const streaming::StreamOptions& options,
                                      std::shared_ptr<streaming::StreamSink> sink) override {
    return engine_->OpenStream(options, std::move(sink));
  }
  absl::Status PushAudio(uint64_t id, absl::Span<const float> samples) override {
    return engine_->PushAudio(id, samples);
  }
  absl::Status FinishStream(uint64_t id) override { return engine_->FinishStream(id); }
  void CancelStream(uint64_t id) override { engine_->CancelStream(id); }
  void StopAccepting() override { engine_->StopAccepting(); }
  size_t ingest_depth() const override { return engine_->ingest_depth(); }
  size_t scheduler_depth() const override { return engine_->scheduler_depth(); }

 private:
  std::unique_ptr<streaming::StreamingEngine> engine_;
};

}  // namespace

std::unique_ptr<StreamEngine> WrapStreamingEngine(
    std::unique_ptr<streaming::StreamingEngine> engine) {
  return std::make_unique<StreamingEngineAdapter>(std::move(engine));
}

}  // namespace waav::server
