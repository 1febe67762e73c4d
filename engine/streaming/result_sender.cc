#include "engine/streaming/result_sender.h"

#include <utility>

namespace waav::streaming {

ResultSender::ResultSender() : thread_([this] { Loop(); }) {}

ResultSender::~ResultSender() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  posted_cv_.notify_one();
  thread_.join();
}

void ResultSender::Post(absl::AnyInvocable<void() &&> task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
    ++posted_;
  }
  posted_cv_.notify_one();
}

void ResultSender::Drain() {
  std::unique_lock lock(mu_);
  const uint64_t target = posted_;
  done_cv_.wait(lock, [&] { return done_ >= target; });
}

void ResultSender::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    posted_cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stop, with nothing left to run
    absl::AnyInvocable<void() &&> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    std::move(task)();
    lock.lock();
    ++done_;
    done_cv_.notify_all();
  }
}

}  // namespace waav::streaming
