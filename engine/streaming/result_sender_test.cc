// ResultSender: tasks run in the order posted, on one thread other than the poster's; Drain
// waits for everything posted before it (and makes its writes visible); the destructor runs
// what is still queued.
#include "engine/streaming/result_sender.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace waav::streaming {
namespace {

TEST(ResultSenderTest, RunsInOrderOnItsOwnThreadAndDrains) {
  ResultSender sender;
  std::vector<int> order;  // written by the sender's thread only, read after Drain
  std::thread::id ran_on;
  for (int i = 0; i < 1000; ++i) {
    sender.Post([&order, &ran_on, i] {
      if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      order.push_back(i);
      ran_on = std::this_thread::get_id();
    });
  }
  sender.Drain();
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_NE(ran_on, std::this_thread::get_id());
  sender.Drain();  // nothing posted: returns at once
  sender.Post([&order] { order.push_back(-1); });
  sender.Drain();
  EXPECT_EQ(order.back(), -1);
}

TEST(ResultSenderTest, TheDestructorRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    ResultSender sender;
    sender.Post([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
    for (int i = 0; i < 50; ++i) sender.Post([&ran] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace waav::streaming
