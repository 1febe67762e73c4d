// What the server needs from the streaming recognition engine: StreamingEngine's contract
// (engine/streaming/streaming_engine.h) as an interface, so that reactor tests can put a fake
// in its place (a full ingest ring, an engine error, a slow engine) without Whisper weights.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/streaming/stream_types.h"
#include "engine/streaming/streaming_engine.h"

namespace waav::server {

class StreamEngine {
 public:
  virtual ~StreamEngine() = default;
  // As StreamingEngine: ResourceExhausted beyond the stream limit, Unavailable after
  // StopAccepting(), InvalidArgument for bad options. The sink is called from an engine thread.
  virtual absl::StatusOr<uint64_t> OpenStream(const streaming::StreamOptions& options,
                                              std::shared_ptr<streaming::StreamSink> sink) = 0;
  // 16 kHz mono samples. ResourceExhausted when the ingest ring is full (nothing was taken:
  // retry later); NotFound once the engine has closed the stream.
  virtual absl::Status PushAudio(uint64_t stream_id, absl::Span<const float> samples_16k) = 0;
  // No more audio; ResourceExhausted when the ring has no room for the marker (retry later).
  virtual absl::Status FinishStream(uint64_t stream_id) = 0;
  virtual void CancelStream(uint64_t stream_id) = 0;
  virtual void StopAccepting() = 0;
  // Chunks waiting in the ingest ring, for the queue-depth gauge.
  virtual size_t ingest_depth() const = 0;
  // Streams waiting for the scheduler, for the queue-depth gauge.
  virtual size_t scheduler_depth() const = 0;
};

// The real engine behind the interface.
std::unique_ptr<StreamEngine> WrapStreamingEngine(
    std::unique_ptr<streaming::StreamingEngine> engine);

}  // namespace waav::server
