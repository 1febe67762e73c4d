// The streaming engine's state of one stream and the jobs its frontend queues for the
// scheduler (private to streaming_engine.cc; a header of its own to keep that file readable).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/models/whisper/vocabulary.h"
#include "engine/streaming/endpointer.h"
#include "engine/streaming/partial_triggers.h"
#include "engine/streaming/stream_types.h"
#include "engine/streaming/utterance_decoder.h"
#include "engine/streaming/voice_activity.h"
#include "engine/streaming/word_gaps.h"

namespace waav::streaming::internal {

struct Job {
  enum Kind { kSpeechStarted, kPartial, kFinal, kSpeechEnded, kDone, kCancelled };
  Kind kind = kDone;
  int utterance_index = 0;
  int64_t offset_ms = 0;
  int64_t detected_ms = 0;
  std::vector<float> audio = {};  // partial/final: the utterance from its padded start
  int64_t start_ms = 0;
  EndReason reason = EndReason::kSilence;
  int64_t newest_audio_ns = 0;  // when the newest audio in the job was published
  double ingest_wait_ms = 0;
  double frontend_ms = 0;
  int64_t queued_ns = 0;
};

struct Stream {
  Stream(const StreamOptions& o, std::shared_ptr<StreamSink> s, std::unique_ptr<VadStreamState> vad,
         const whisper::Vocabulary& vocabulary)
      : options(o),
        sink(std::move(s)),
        vad_state(std::move(vad)),
        endpointer(o.endpoint),
        word_gaps(static_cast<float>(o.gap_partial_db)),
        partial_triggers(o),
        decoder(vocabulary, o) {}

  uint64_t id = 0;
  const StreamOptions options;
  const std::shared_ptr<StreamSink> sink;
  std::atomic<bool> finishing{false};
  std::atomic<bool> cancelled{false};
  std::atomic<int64_t> received_samples{0};
  std::atomic<bool> decoding{false};  // a window of this stream is in the scheduler's round

  // Frontend worker only.
  std::unique_ptr<VadStreamState> vad_state;
  Endpointer endpointer;
  WordGapDetector word_gaps;    // used when options.gap_partial_db > 0
  std::vector<float> pending;   // arrived, not yet through the VAD
  int64_t vad_samples = 0;      // samples through the VAD so far
  std::vector<float> retained;  // audio [retained_begin, vad_samples)
  int64_t retained_begin = 0;
  PartialTriggers partial_triggers;
  int utterance_index = 0;
  bool end_of_stream = false;
  bool frontend_done = false;
  int64_t newest_ns = 0;
  double ingest_wait_ms = 0;

  // Scheduler.
  std::mutex jobs_mu;
  std::deque<Job> jobs;
  bool in_ready_queue = false;
  UtteranceDecoder decoder;
  absl::Status error;  // set by the frontend before its kDone job
  bool done = false;
};

}  // namespace waav::streaming::internal
