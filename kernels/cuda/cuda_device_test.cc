// Which GPU a CUDA backend runs on (CudaBackendOptions::device_index, waavd's gpu_device): an
// ordinal that is not there is refused, and a backend on the second GPU works from threads that
// never selected it (the CUDA runtime keeps the current device per thread: the streaming
// scheduler's and gRPC's threads start on GPU 0). Skips and says why without a usable GPU, and
// the second test without a second one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <thread>
#include <vector>

#include "engine/runtime/backend_registry.h"
#include "engine/runtime/dtype.h"
#include "engine/runtime/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/gpu.h"

namespace waav {
namespace {

int VisibleGpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

TEST(CudaDeviceTest, AnOrdinalThatIsNotThereIsRefused) {
  const int count = VisibleGpus();
  if (count == 0) GTEST_SKIP() << "no usable GPU, CUDA test skipped";
  CudaBackendOptions options;
  options.device_index = count;
  const auto missing = CreateCudaBackend(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument) << missing.status();
  options.device_index = -1;
  EXPECT_EQ(CreateCudaBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  // By name through the registry (what waavd's gpu_device reaches): the same refusal.
  const auto named = CreateBackend("cuda", {.device_index = count});
  EXPECT_FALSE(named.ok());
}

// The last GPU's backend created on this thread, then used only from another thread (whose
// current device is GPU 0): eager calls, a captured graph replayed, copies both ways; its memory
// is on that GPU, and the results equal the CPU's.
TEST(CudaDeviceTest, TheLastGpuWorksFromAnotherThread) {
  const int count = VisibleGpus();
  if (count < 2) {
    GTEST_SKIP() << (count == 0 ? "no usable GPU" : "one GPU")
                 << ": the device-selection test needs two, skipped";
  }
  const int device = count - 1;
  CudaBackendOptions options;
  options.device_index = device;
  options.math = CudaMath::kAccurate;  // f32 GEMMs in f32 (kFast: TF32), so the CPU's to 1e-5
  auto created = CreateCudaBackend(options);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Backend> gpu = std::move(*created);
  std::unique_ptr<Backend> cpu = CreateCpuBackend({});
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  constexpr int64_t kRows = 24, kIn = 96, kOut = 40;
  std::vector<float> x(kRows * kIn), w(kOut * kIn), b(kOut);
  for (std::vector<float>* v : {&x, &w, &b}) {
    for (float& e : *v) e = value(rng);
  }
  std::vector<float> want(kRows * kOut), got(kRows * kOut, std::nanf(""));
  {
    auto tx = Upload(*cpu, Shape{kRows, kIn}, DType::kF32, x.data());
    auto tw = Upload(*cpu, Shape{kOut, kIn}, DType::kF32, w.data());
    auto tb = Upload(*cpu, Shape{kOut}, DType::kF32, b.data());
    auto ty = cpu->Allocate(Shape{kRows, kOut}, DType::kF32);
    ASSERT_TRUE(tx.ok() && tw.ok() && tb.ok() && ty.ok());
    ASSERT_TRUE(cpu->Linear(*tx, *tw, &*tb, Activation::kGelu, *ty).ok());
    ASSERT_TRUE(cpu->CopyToHost(*ty, want.data(), want.size() * sizeof(float)).ok());
  }
  // The tensors are allocated here (the pool selects the GPU as it allocates, which would
  // set the other thread's device as a side effect); the other thread only issues work.
  auto tx = gpu->Allocate(Shape{kRows, kIn}, DType::kF32);
  auto tw = gpu->Allocate(Shape{kOut, kIn}, DType::kF32);
  auto tb = gpu->Allocate(Shape{kOut}, DType::kF32);
  auto ty = gpu->Allocate(Shape{kRows, kOut}, DType::kF32);
  ASSERT_TRUE(tx.ok() && tw.ok() && tb.ok() && ty.ok());
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, ty->data()), cudaSuccess);
  EXPECT_EQ(attributes.device, device);
  absl::Status status;
  int thread_device = -1;
  std::thread other([&] {
    (void)cudaGetDevice(&thread_device);  // GPU 0: a new thread's current device
    auto run = [&]() -> absl::Status {
      RETURN_IF_ERROR(gpu->CopyFromHost(x.data(), x.size() * sizeof(float), *tx));
      RETURN_IF_ERROR(gpu->CopyFromHost(w.data(), w.size() * sizeof(float), *tw));
      RETURN_IF_ERROR(gpu->CopyFromHost(b.data(), b.size() * sizeof(float), *tb));
      RETURN_IF_ERROR(gpu->Linear(*tx, *tw, &*tb, Activation::kGelu, *ty));
      RETURN_IF_ERROR(gpu->CopyToHost(*ty, got.data(), got.size() * sizeof(float)));
      std::vector<float> eager = got;
      std::fill(got.begin(), got.end(), std::nanf(""));
      RETURN_IF_ERROR(gpu->CopyFromHost(got.data(), got.size() * sizeof(float), *ty));
      RETURN_IF_ERROR(gpu->BeginCapture());
      const absl::Status captured = gpu->Linear(*tx, *tw, &*tb, Activation::kGelu, *ty);
      auto graph = gpu->EndCapture();
      RETURN_IF_ERROR(captured);
      RETURN_IF_ERROR(graph.status());
      RETURN_IF_ERROR((*graph)->Replay());
      RETURN_IF_ERROR(gpu->CopyToHost(*ty, got.data(), got.size() * sizeof(float)));
      if (eager != got) return absl::InternalError("the replay differs from the eager call");
      return gpu->Synchronize();
    };
    status = run();
  });
  other.join();
  EXPECT_EQ(thread_device, 0);
  ASSERT_TRUE(status.ok()) << status;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    worst = std::max(worst, std::fabs(double{got[i]} - want[i]) / (1.0 + std::fabs(want[i])));
  }
  std::cout << "GPU " << device << " from another thread: largest difference from the CPU "
            << worst << "\n";
  EXPECT_LE(worst, 1e-5) << "seed " << seed;
}

}  // namespace
}  // namespace waav
