#include "engine/streaming/ingest_ring.h"

#include <map>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace waav::streaming {
namespace {

TEST(IngestRingTest, LongPushesSplitIntoSlotsInOrder) {
  IngestRing ring(16);
  std::vector<float> samples(4000);
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = static_cast<float>(i);
  ASSERT_TRUE(ring.Push(7, samples, 1));
  std::vector<IngestChunk> out;
  EXPECT_EQ(ring.Drain(&out, 100), 3u);  // 1600 + 1600 + 800
  std::vector<float> joined;
  for (const IngestChunk& c : out) {
    EXPECT_EQ(c.stream_id, 7u);
    joined.insert(joined.end(), c.samples, c.samples + c.num_samples);
  }
  EXPECT_EQ(joined, samples);
}

TEST(IngestRingTest, FullRingRefusesWholePushesAndRecovers) {
  IngestRing ring(4);
  std::vector<float> one(1600, 1.0f);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ring.Push(1, one, 0));
  EXPECT_FALSE(ring.Push(1, one, 0));
  EXPECT_FALSE(ring.PushEndOfStream(1, 0));
  std::vector<IngestChunk> out;
  EXPECT_EQ(ring.Drain(&out, 2), 2u);
  std::vector<float> three(3 * 1600, 2.0f);
  EXPECT_FALSE(ring.Push(1, three, 0));  // needs 3 slots, 2 free: all or nothing
  EXPECT_TRUE(ring.Push(1, std::vector<float>(2 * 1600, 3.0f), 0));
  EXPECT_EQ(ring.Drain(&out, 10), 4u);
}

TEST(IngestRingTest, ManyProducersLoseNothingAndKeepPerStreamOrder) {
  IngestRing ring(256);
  constexpr int kProducers = 4;
  constexpr int kChunks = 2000;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&ring, p] {
      for (int i = 0; i < kChunks; ++i) {
        std::vector<float> chunk(1 + (i % 3) * 1000, static_cast<float>(i));
        while (!ring.Push(static_cast<uint64_t>(p), chunk, 0)) std::this_thread::yield();
      }
    });
  }
  std::map<uint64_t, float> last;
  std::map<uint64_t, int> counts;
  std::vector<IngestChunk> out;
  size_t expected_slots = 0;
  for (int i = 0; i < kChunks; ++i) expected_slots += (1 + (i % 3) * 1000 + 1599) / 1600;
  expected_slots *= kProducers;
  size_t drained = 0;
  while (drained < expected_slots) {
    out.clear();
    drained += ring.Drain(&out, 64);
    for (const IngestChunk& c : out) {
      const float value = c.samples[0];
      auto it = last.find(c.stream_id);
      if (it != last.end()) {
        ASSERT_GE(value, it->second) << "stream " << c.stream_id;
      }
      last[c.stream_id] = value;
      ++counts[c.stream_id];
    }
  }
  for (auto& t : producers) t.join();
  for (int p = 0; p < kProducers; ++p) EXPECT_EQ(last[static_cast<uint64_t>(p)], kChunks - 1);
}

TEST(IngestRingTest, CloseWakesTheConsumerAndRefusesPushes) {
  IngestRing ring(8);
  std::thread closer([&] { ring.Close(); });
  ring.WaitForWork(5'000'000'000);
  closer.join();
  EXPECT_TRUE(ring.closed());
  EXPECT_FALSE(ring.Push(1, std::vector<float>(10), 0));
}

}  // namespace
}  // namespace waav::streaming
