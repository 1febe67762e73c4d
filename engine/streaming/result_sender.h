// A thread of its own that runs posted tasks one at a time, in the order posted: the streaming
// scheduler hands it each result to send (the stream's decoder settles its agreement and words,
// the sink writes to the client), so that its own thread goes on issuing the batch's decoder
// steps meanwhile instead of doing the host work between them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/functional/any_invocable.h"

namespace waav::streaming {

class ResultSender {
 public:
  ResultSender();
  // Runs what was posted, then stops the thread.
  ~ResultSender();
  ResultSender(const ResultSender&) = delete;
  ResultSender& operator=(const ResultSender&) = delete;

  // Queues `task` behind every task posted before.
  void Post(absl::AnyInvocable<void() &&> task);
  // Returns once every task posted before the call has run (what they wrote is then visible
  // to the caller).
  void Drain();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable posted_cv_;  // a task was posted, or stop
  std::condition_variable done_cv_;    // a task ran
  std::deque<absl::AnyInvocable<void() &&>> tasks_;
  uint64_t posted_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it reads exist
};

}  // namespace waav::streaming
