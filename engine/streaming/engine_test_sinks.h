// Test stand-ins for the streaming engine's tests: a voice-activity model that judges frames by
// their energy, a sink that records every event, and sinks that hold the scheduler's thread at
// a chosen call until a gate opens (to put the scheduler in a known state).
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/streaming/stream_types.h"
#include "engine/streaming/voice_activity.h"

namespace waav::streaming::testing {

class EnergyVad : public VoiceActivityModel {
 public:
  int frame_samples() const override { return 512; }
  std::unique_ptr<VadStreamState> NewState() const override {
    return std::make_unique<VadStreamState>();
  }
  absl::Status Process(absl::Span<const float> frames, absl::Span<VadStreamState* const> states,
                       absl::Span<float> probabilities) override {
    for (size_t b = 0; b < states.size(); ++b) {
      double energy = 0;
      for (int i = 0; i < 512; ++i) {
        const double x = frames[b * 512 + static_cast<size_t>(i)];
        energy += x * x;
      }
      const double rms = std::sqrt(energy / 512);
      probabilities[b] = rms > 0.01 ? 0.95f : 0.05f;
    }
    return absl::OkStatus();
  }
};

struct Event {
  std::string kind;
  RecognitionResult result;
};

class RecordingSink : public StreamSink {
 public:
  void OnSpeechStarted(int index, int64_t, int64_t) override { Add({"started", {}}, index); }
  void OnResult(const RecognitionResult& r) override {
    Add({r.is_final ? "final" : "partial", r}, r.utterance_index);
  }
  void OnSpeechEnded(int index, int64_t, int64_t) override { Add({"ended", {}}, index); }
  void OnDone(absl::Status status, int64_t) override {
    std::lock_guard lock(mu_);
    done_ = true;
    status_ = status;
    cv_.notify_all();
  }
  absl::Status Wait() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(120), [&] { return done_; });
    return done_ ? status_ : absl::DeadlineExceededError("no OnDone");
  }
  std::vector<Event> events() {
    std::lock_guard lock(mu_);
    return events_;
  }

 private:
  void Add(Event e, int index) {
    std::lock_guard lock(mu_);
    e.result.utterance_index = index;
    events_.push_back(std::move(e));
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> events_;
  bool done_ = false;
  absl::Status status_;
};

// Stops whoever calls Pass() until Open() (or two minutes, so that a failing test cannot hang).
class Gate {
 public:
  void Pass() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(120), [&] { return open_; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Holds the scheduler thread at its first sink call until the gate opens.
class GatedSink : public RecordingSink {
 public:
  explicit GatedSink(Gate* gate) : gate_(gate) {}
  void OnSpeechStarted(int index, int64_t offset_ms, int64_t detected_ms) override {
    gate_->Pass();
    RecordingSink::OnSpeechStarted(index, offset_ms, detected_ms);
  }

 private:
  Gate* gate_;
};

// A GatedSink that also says when the scheduler has reached it.
class ArrivalGatedSink : public RecordingSink {
 public:
  ArrivalGatedSink(Gate* gate, std::atomic<bool>* arrived) : gate_(gate), arrived_(arrived) {}
  void OnSpeechStarted(int index, int64_t offset_ms, int64_t detected_ms) override {
    arrived_->store(true);
    gate_->Pass();
    RecordingSink::OnSpeechStarted(index, offset_ms, detected_ms);
  }

 private:
  Gate* gate_;
  std::atomic<bool>* arrived_;
};

// Holds the scheduler thread at the first result it delivers (inside its round's decode) until
// the gate opens, and says when it got there.
class ResultGatedSink : public RecordingSink {
 public:
  ResultGatedSink(Gate* gate, std::atomic<bool>* arrived) : gate_(gate), arrived_(arrived) {}
  void OnResult(const RecognitionResult& r) override {
    if (!arrived_->exchange(true)) gate_->Pass();
    RecordingSink::OnResult(r);
  }

 private:
  Gate* gate_;
  std::atomic<bool>* arrived_;
};

}  // namespace waav::streaming::testing
