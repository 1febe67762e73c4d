// Backend::stats() of the CUDA backend, with CUDA graphs and with eager graphs: what the daemon
// exports as waav_kernel_launches_total, waav_graph_replays_total and waav_device_memory_*.
// Skips and says why without a usable GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/memory_pool.h"

namespace waav {
namespace {

class CudaStatsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    CudaBackendOptions options;
    options.use_graphs = GetParam();
    auto gpu = CreateCudaBackend(options);
    if (!gpu.ok()) GTEST_SKIP() << "no usable GPU, CUDA test skipped: " << gpu.status().message();
    gpu_ = std::move(*gpu);
  }
  void TearDown() override {
    if (HasFailure()) std::cout << "random seed of this test: " << seed_ << "\n";
  }
  int RandomInt(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<Backend> gpu_;
};

TEST_P(CudaStatsTest, CountsCallsReplaysAndMemory) {
  // The backend holds some memory of its own from the start (error counters, cuBLAS workspace).
  const BackendStats fresh = gpu_->stats();
  EXPECT_EQ(fresh.kernel_launches, 0u);
  EXPECT_EQ(fresh.graph_replays, 0u);
  EXPECT_GT(fresh.memory_capacity_bytes, uint64_t{1} << 30);
  EXPECT_GE(fresh.memory_held_bytes, fresh.memory_in_use_bytes);
  EXPECT_LT(fresh.memory_held_bytes, fresh.memory_capacity_bytes);

  const int64_t n = RandomInt(1, 1 << 20);
  const uint64_t block = cuda::DevicePool::SizeClass(static_cast<size_t>(n) * 4);
  std::vector<float> values(static_cast<size_t>(n), 0.5f);
  auto a = Upload(*gpu_, Shape{n}, DType::kF32, values.data());
  auto b = Upload(*gpu_, Shape{n}, DType::kF32, values.data());
  ASSERT_TRUE(a.ok() && b.ok());
  std::optional<Tensor> y = *gpu_->Allocate(Shape{n}, DType::kF32);
  const BackendStats allocated = gpu_->stats();
  EXPECT_EQ(allocated.memory_in_use_bytes, fresh.memory_in_use_bytes + 3 * block);
  EXPECT_GE(allocated.memory_held_bytes, allocated.memory_in_use_bytes);
  const uint64_t launches0 = allocated.kernel_launches;  // uploads are copies, not kernels

  const int calls = RandomInt(1, 20);
  for (int i = 0; i < calls; ++i) ASSERT_TRUE(gpu_->Add(*a, *b, *y).ok());
  EXPECT_EQ(gpu_->stats().kernel_launches, launches0 + static_cast<uint64_t>(calls));

  // Captured calls are not launches; each replay counts once.
  ASSERT_TRUE(gpu_->BeginCapture().ok());
  ASSERT_TRUE(gpu_->Add(*a, *b, *y).ok());
  ASSERT_TRUE(gpu_->Gelu(*y, *y).ok());
  auto graph = gpu_->EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const int replays = RandomInt(1, 10);
  for (int i = 0; i < replays; ++i) ASSERT_TRUE((*graph)->Replay().ok());
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(gpu_->stats().kernel_launches, launches0 + static_cast<uint64_t>(calls));
  EXPECT_EQ(gpu_->stats().graph_replays, static_cast<uint64_t>(replays));

  // Another thread may read the statistics while this one submits: totals only grow.
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    uint64_t last = 0;
    while (!stop.load()) {
      const uint64_t now = gpu_->stats().kernel_launches;
      EXPECT_GE(now, last);
      last = now;
    }
  });
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(gpu_->Add(*a, *b, *y).ok());
  stop.store(true);
  reader.join();
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(gpu_->stats().kernel_launches, launches0 + static_cast<uint64_t>(calls + 200));

  // A released block stops being in use and stays held by the pool's cache.
  graph->reset();
  y.reset();
  const BackendStats released = gpu_->stats();
  EXPECT_EQ(released.memory_in_use_bytes, allocated.memory_in_use_bytes - block);
  EXPECT_GE(released.memory_held_bytes, allocated.memory_held_bytes);
}

INSTANTIATE_TEST_SUITE_P(Graphs, CudaStatsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("CudaGraphs")
                                             : std::string("EagerGraphs");
                         });

}  // namespace
}  // namespace waav
