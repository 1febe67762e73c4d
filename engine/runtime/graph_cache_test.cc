// GraphCache on the CPU backend, which records graphs: captured once per set of tensors,
// replayed on their current values, captured again for other tensors, eager when disabled.
#include "engine/runtime/graph_cache.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace waav {
namespace {

class GraphCacheTest : public ::testing::Test {
 protected:
  Tensor Make(const std::vector<float>& values) {
    auto t = backend_->Allocate({static_cast<int64_t>(values.size())}, DType::kF32);
    EXPECT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(backend_->CopyFromHost(values.data(), values.size() * 4, *t).ok());
    return *t;
  }
  std::vector<float> Read(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    EXPECT_TRUE(backend_->CopyToHost(t, v.data(), v.size() * 4).ok());
    return v;
  }
  std::vector<float> Draw(size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist_(rng_);
    return v;
  }

  std::unique_ptr<Backend> backend_ = CreateCpuBackend({.num_threads = 1});
  const unsigned seed_ = std::random_device{}();
  std::mt19937 rng_{seed_};
  std::uniform_real_distribution<float> dist_{-1.0f, 1.0f};
};

std::vector<float> Sum(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
  return y;
}

TEST_F(GraphCacheTest, CapturesOncePerTensorsAndReplaysCurrentValues) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  GraphCache cache(2);
  std::vector<float> a = Draw(16), b = Draw(16);
  Tensor ta = Make(a), tb = Make(b), ty = Make(Draw(16));
  // `which` picks the output; the cache keys on the tensors named, so the caller names them all.
  Tensor out = ty;
  auto run = [&] {
    const Tensor* tensors[] = {&ta, &tb, &out};
    return cache.Run(*backend_, true, tensors, [&] { return backend_->Add(ta, tb, out); });
  };
  ASSERT_TRUE(run().ok());
  EXPECT_EQ(Read(ty), Sum(a, b));  // the capture's first replay ran it
  EXPECT_EQ(cache.captures(), 1u);
  a = Draw(16);  // new values in the same tensor: replayed, not captured
  ASSERT_TRUE(backend_->CopyFromHost(a.data(), 64, ta).ok());
  ASSERT_TRUE(run().ok());
  EXPECT_EQ(Read(ty), Sum(a, b));
  EXPECT_EQ(cache.captures(), 1u);
  // Another output tensor (as after a reallocation): captured anew, written there.
  Tensor tz = Make(Draw(16));
  out = tz;
  ASSERT_TRUE(run().ok());
  EXPECT_EQ(cache.captures(), 2u);
  EXPECT_EQ(Read(tz), Sum(a, b));
  EXPECT_EQ(cache.size(), 2u);
  // Back to the first: still cached. A third set evicts the least recently used.
  out = ty;
  ASSERT_TRUE(run().ok());
  EXPECT_EQ(cache.captures(), 2u);
  Tensor tw = Make(Draw(16));
  out = tw;
  ASSERT_TRUE(run().ok());
  EXPECT_EQ(cache.captures(), 3u);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(Read(tw), Sum(a, b));
  EXPECT_GE(backend_->stats().graph_replays, 5u);
}

TEST_F(GraphCacheTest, DisabledRunsEagerAndCaptureErrorsEndTheCapture) {
  GraphCache cache;
  std::vector<float> a = Draw(8), b = Draw(8);
  Tensor ta = Make(a), tb = Make(b), ty = Make(Draw(8));
  const Tensor* tensors[] = {&ta, &tb, &ty};
  ASSERT_TRUE(cache.Run(*backend_, false, tensors, [&] { return backend_->Add(ta, tb, ty); }).ok());
  EXPECT_EQ(Read(ty), Sum(a, b));
  EXPECT_EQ(cache.captures(), 0u);
  EXPECT_EQ(backend_->stats().graph_replays, 0u);
  // A call failing while recorded fails Run, leaves no graph and no open capture.
  Tensor wrong = Make(Draw(4));
  const absl::Status failed =
      cache.Run(*backend_, true, tensors, [&] { return backend_->Add(ta, wrong, ty); });
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(backend_->BeginCapture().ok());  // not left capturing
  EXPECT_TRUE(backend_->EndCapture().ok());
}

}  // namespace
}  // namespace waav
