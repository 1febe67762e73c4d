// Backend::AllocateHost and CopyFromHostAsync on CUDA (pinned memory, uploads that return at
// once): what arrives on the device, stream order against a kernel, and the refusals;
// CopyToHostAsync and WaitForCopy (downloads waited for one at a time while later work runs);
// GatherRows (rows copied on the device) and FeedChoices against the CPU backend's. Skips and
// says why without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "engine/runtime/dtype.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace waav {
namespace {

class CudaHostCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    auto gpu = CreateCudaBackend({});
    if (!gpu.ok()) GTEST_SKIP() << "no usable GPU, CUDA test skipped: " << gpu.status().message();
    gpu_ = std::move(*gpu);
  }
  void TearDown() override {
    if (HasFailure()) std::cout << "random seed of this test: " << seed_ << "\n";
  }

  std::vector<float> RandomValues(int64_t n) {
    std::uniform_real_distribution<float> value(-4.0f, 4.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = value(rng_);
    return v;
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<Backend> gpu_;
};

// Two pinned buffers uploaded back to back, each followed by a kernel reading what arrived:
// the kernel sees the upload before it (stream order), and each buffer may be rewritten after
// the Synchronize.
TEST_F(CudaHostCopyTest, UploadsArriveInStreamOrder) {
  const int64_t n = std::uniform_int_distribution<int64_t>(1, 1 << 20)(rng_);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  auto empty = gpu_->AllocateHost(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  auto a = gpu_->AllocateHost(bytes + 64);  // larger than one upload: the first bytes go
  auto b = gpu_->AllocateHost(bytes);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
  ASSERT_EQ(a->size_bytes(), bytes + 64);
  const std::vector<float> x = RandomValues(n), y = RandomValues(n);
  auto x_dev = gpu_->Allocate(Shape{n}, DType::kF32);
  auto y_dev = gpu_->Allocate(Shape{n}, DType::kF32);
  auto sum = gpu_->Allocate(Shape{n}, DType::kF32);
  ASSERT_TRUE(x_dev.ok() && y_dev.ok() && sum.ok());
  for (int round = 0; round < 2; ++round) {
    // Round 1 swaps the roles: the buffers are rewritten only after the last Synchronize.
    const std::vector<float>& first = round == 0 ? x : y;
    const std::vector<float>& second = round == 0 ? y : x;
    std::memcpy(a->data(), first.data(), bytes);
    std::memcpy(b->data(), second.data(), bytes);
    ASSERT_TRUE(gpu_->CopyFromHostAsync(*a, bytes, *x_dev).ok());
    ASSERT_TRUE(gpu_->CopyFromHostAsync(*b, bytes, *y_dev).ok());
    ASSERT_TRUE(gpu_->Add(*x_dev, *y_dev, *sum).ok());
    ASSERT_TRUE(gpu_->Synchronize().ok());
    std::vector<float> got(static_cast<size_t>(n)), got_x(static_cast<size_t>(n));
    ASSERT_TRUE(gpu_->CopyToHost(*sum, got.data(), bytes).ok());
    ASSERT_TRUE(gpu_->CopyToHost(*x_dev, got_x.data(), bytes).ok());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got_x[i], first[i]) << "round " << round << ", element " << i;
      ASSERT_EQ(got[i], first[i] + second[i]) << "round " << round << ", element " << i;
    }
  }
}

TEST_F(CudaHostCopyTest, RefusesShortBuffersWrongSizesAndCapture) {
  auto host = gpu_->AllocateHost(1024);
  ASSERT_TRUE(host.ok());
  auto small = gpu_->Allocate(Shape{128}, DType::kF32);  // 512 bytes
  auto large = gpu_->Allocate(Shape{512}, DType::kF32);  // 2048 bytes
  ASSERT_TRUE(small.ok() && large.ok());
  // More bytes than the host buffer holds, and a byte count that is not dst's size.
  EXPECT_EQ(gpu_->CopyFromHostAsync(*host, 2048, *large).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyFromHostAsync(*host, 1024, *small).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyFromHostAsync(HostBuffer(), 512, *small).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->CopyFromHostAsync(*host, 512, *small).ok());
  // From an offset: what lies there arrives; past the buffer's end refused.
  ASSERT_TRUE(gpu_->Synchronize().ok());  // (the copy above reads the buffer until then)
  auto* bytes = static_cast<unsigned char*>(host->data());
  for (int i = 0; i < 1024; ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  ASSERT_TRUE(gpu_->CopyFromHostAsync(*host, 512, *small, 512).ok());
  std::vector<unsigned char> back(512);
  ASSERT_TRUE(gpu_->CopyToHost(*small, back.data(), back.size()).ok());
  EXPECT_EQ(std::memcmp(back.data(), bytes + 512, 512), 0);
  EXPECT_EQ(gpu_->CopyFromHostAsync(*host, 512, *small, 513).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyFromHostAsync(*host, 512, *small, ~size_t{0}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(gpu_->BeginCapture().ok());
  EXPECT_EQ(gpu_->CopyFromHostAsync(*host, 512, *small).code(),
            absl::StatusCode::kFailedPrecondition);
  (void)gpu_->EndCapture();
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

// Downloads that return at once, each waited for by its ticket: each sees the work before it
// (stream order, though it runs on a copy stream), the tickets outlast the reuse of their events
// (more tickets than events, waited for out of order), and the refusals (unissued tickets, short
// buffers, capture). A bad index reported by a kernel comes back from the wait.
TEST_F(CudaHostCopyTest, DownloadsAreWaitedForByTicket) {
  const int64_t n = std::uniform_int_distribution<int64_t>(1, 1 << 18)(rng_);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  constexpr int kCopies = 20;
  auto host = gpu_->AllocateHost(kCopies * bytes);
  ASSERT_TRUE(host.ok());
  const std::vector<float> x = RandomValues(n), y = RandomValues(n);
  auto acc = gpu_->Allocate(Shape{n}, DType::kF32);
  auto step = gpu_->Allocate(Shape{n}, DType::kF32);
  auto snapshots = gpu_->Allocate(Shape{kCopies, n}, DType::kF32);
  ASSERT_TRUE(acc.ok() && step.ok() && snapshots.ok());
  ASSERT_TRUE(gpu_->CopyFromHost(x.data(), bytes, *acc).ok());
  ASSERT_TRUE(gpu_->CopyFromHost(y.data(), bytes, *step).ok());
  // Snapshot i is acc after i additions, x + i·y (in f32 as the kernel adds); each is copied
  // while later additions run, and none is written again (CopyToHostAsync's rule for src).
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kCopies; ++i) {
    if (i > 0) {
      ASSERT_TRUE(gpu_->Add(*acc, *step, *acc).ok());
    }
    auto snapshot = snapshots->Slice(i, i + 1);
    ASSERT_TRUE(snapshot.ok());
    ASSERT_TRUE(gpu_->Copy(*acc, *snapshot).ok());
    auto ticket = gpu_->CopyToHostAsync(*snapshot, *host, static_cast<size_t>(i) * bytes);
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    if (!tickets.empty()) {
      EXPECT_GT(*ticket, tickets.back());
    }
    tickets.push_back(*ticket);
  }
  // Waited for in a shuffled order: every copy holds its own sum.
  std::vector<int> order(kCopies);
  for (int i = 0; i < kCopies; ++i) order[static_cast<size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), rng_);
  for (int i : order) {
    ASSERT_TRUE(gpu_->WaitForCopy(tickets[static_cast<size_t>(i)]).ok());
    std::vector<float> want = x;
    for (int k = 0; k < i; ++k) {
      for (size_t e = 0; e < want.size(); ++e) want[e] += y[e];
    }
    const float* got = host->data_as<float>() + static_cast<size_t>(i) * static_cast<size_t>(n);
    ASSERT_EQ(std::memcmp(got, want.data(), bytes), 0) << "copy " << i;
  }
  EXPECT_EQ(gpu_->WaitForCopy(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->WaitForCopy(tickets.back() + 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyToHostAsync(*acc, *host, kCopies * bytes - 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->CopyToHostAsync(*acc, HostBuffer()).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(gpu_->BeginCapture().ok());
  EXPECT_EQ(gpu_->CopyToHostAsync(*acc, *host).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu_->WaitForCopy(tickets.back()).code(), absl::StatusCode::kFailedPrecondition);
  (void)gpu_->EndCapture();
  // A kernel's report (a bad mask index) reaches the wait of the copy after it.
  const std::vector<int32_t> zeros = {0, 0, 0, 0}, bad_index = {0, 1};
  const std::vector<float> logits_values = RandomValues(200);
  auto logits = gpu_->Allocate(Shape{2, 100}, DType::kF32);
  auto masks = gpu_->Allocate(Shape{1, 4}, DType::kI32);
  auto index = gpu_->Allocate(Shape{2}, DType::kI32);
  auto out = gpu_->Allocate(Shape{2, 5}, DType::kF32);
  ASSERT_TRUE(logits.ok() && masks.ok() && index.ok() && out.ok());
  ASSERT_TRUE(gpu_->CopyFromHost(logits_values.data(), 800, *logits).ok());
  ASSERT_TRUE(gpu_->CopyFromHost(zeros.data(), 16, *masks).ok());
  ASSERT_TRUE(gpu_->CopyFromHost(bad_index.data(), 8, *index).ok());
  ASSERT_TRUE(gpu_->ArgmaxLogSumExp(*logits, *masks, *index, *out).ok());
  auto ticket = gpu_->CopyToHostAsync(*out, *host);
  ASSERT_TRUE(ticket.ok());
  const absl::Status reported = gpu_->WaitForCopy(*ticket);
  EXPECT_EQ(reported.code(), absl::StatusCode::kInvalidArgument) << reported;
  EXPECT_TRUE(gpu_->Synchronize().ok()) << "the report is read once";
}

// FeedChoices against the CPU backend on random rows (mask indices −1 and up, positions at and
// past max_position, tokens as [B, 1]); a choice that is no token id reported at the next wait.
TEST_F(CudaHostCopyTest, FeedChoicesMatchesCpu) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend({.num_threads = 1});
  for (const int64_t rows : {int64_t{1}, int64_t{7}, int64_t{300}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    std::vector<float> choices(static_cast<size_t>(rows) * 5);
    std::vector<int32_t> index(static_cast<size_t>(rows)), tokens(static_cast<size_t>(rows)),
        positions(static_cast<size_t>(rows)), lengths(static_cast<size_t>(rows));
    for (int64_t b = 0; b < rows; ++b) {
      const size_t i = static_cast<size_t>(b);
      choices[i * 5] = static_cast<float>(std::uniform_int_distribution<int>(0, 51865)(rng_));
      for (int k = 1; k < 5; ++k) choices[i * 5 + static_cast<size_t>(k)] = RandomValues(1)[0];
      index[i] = std::uniform_int_distribution<int32_t>(-1, 4)(rng_);
      tokens[i] = std::uniform_int_distribution<int32_t>(0, 51865)(rng_);
      positions[i] = std::uniform_int_distribution<int32_t>(0, 450)(rng_);
      lengths[i] = std::uniform_int_distribution<int32_t>(0, 450)(rng_);
    }
    std::vector<std::vector<int32_t>> got;
    for (Backend* backend : {gpu_.get(), cpu.get()}) {
      auto c = backend->Allocate(Shape{rows, 5}, DType::kF32);
      auto idx = backend->Allocate(Shape{rows}, DType::kI32);
      auto t = backend->Allocate(Shape{rows, 1}, DType::kI32);
      auto p = backend->Allocate(Shape{rows}, DType::kI32);
      auto l = backend->Allocate(Shape{rows}, DType::kI32);
      ASSERT_TRUE(c.ok() && idx.ok() && t.ok() && p.ok() && l.ok());
      const size_t row_bytes = static_cast<size_t>(rows) * 4;
      ASSERT_TRUE(backend->CopyFromHost(choices.data(), row_bytes * 5, *c).ok());
      ASSERT_TRUE(backend->CopyFromHost(index.data(), row_bytes, *idx).ok());
      ASSERT_TRUE(backend->CopyFromHost(tokens.data(), row_bytes, *t).ok());
      ASSERT_TRUE(backend->CopyFromHost(positions.data(), row_bytes, *p).ok());
      ASSERT_TRUE(backend->CopyFromHost(lengths.data(), row_bytes, *l).ok());
      const absl::Status fed = backend->FeedChoices(*c, *idx, 447, *t, *p, *l);
      ASSERT_TRUE(fed.ok()) << fed;
      std::vector<int32_t> all(static_cast<size_t>(rows) * 3);
      ASSERT_TRUE(backend->CopyToHost(*t, all.data(), row_bytes).ok());
      ASSERT_TRUE(backend->CopyToHost(*p, all.data() + rows, row_bytes).ok());
      ASSERT_TRUE(backend->CopyToHost(*l, all.data() + 2 * rows, row_bytes).ok());
      got.push_back(std::move(all));
    }
    EXPECT_EQ(got[0], got[1]);
  }
  const std::vector<float> bad = {2.5f, 0, 0, 0, 0};
  const std::vector<int32_t> zero = {0};
  auto c = gpu_->Allocate(Shape{1, 5}, DType::kF32);
  auto idx = gpu_->Allocate(Shape{1}, DType::kI32);
  auto t = gpu_->Allocate(Shape{1}, DType::kI32);
  auto p = gpu_->Allocate(Shape{1}, DType::kI32);
  auto l = gpu_->Allocate(Shape{1}, DType::kI32);
  ASSERT_TRUE(c.ok() && idx.ok() && t.ok() && p.ok() && l.ok());
  ASSERT_TRUE(gpu_->CopyFromHost(bad.data(), 20, *c).ok());
  ASSERT_TRUE(gpu_->CopyFromHost(zero.data(), 4, *idx).ok());
  ASSERT_TRUE(gpu_->FeedChoices(*c, *idx, 447, *t, *p, *l).ok());
  const absl::Status reported = gpu_->Synchronize();
  EXPECT_EQ(reported.code(), absl::StatusCode::kInvalidArgument) << reported;
  EXPECT_NE(reported.message().find("choices[0][0] = 2.5"), absl::string_view::npos) << reported;
  EXPECT_EQ(gpu_->FeedChoices(*c, *idx, -1, *t, *p, *l).code(), absl::StatusCode::kInvalidArgument);
}

// Random rows (repeats, any order) of f32 and f16 matrices whose rows take each copy width of the
// kernel (16-, 4- and 1-byte words) and more indices than one launch carries (256), against the
// CPU backend's GatherRows of the same values.
TEST_F(CudaHostCopyTest, GatherRowsMatchesCpu) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend({.num_threads = 1});
  struct Case {
    int64_t n, channels, count;
    DType dtype;
  };
  for (const Case c :
       {Case{2000, 384, 300, DType::kF32}, Case{7, 3, 5, DType::kF32}, Case{9, 3, 12, DType::kF16},
        Case{64, 384, 64, DType::kF16}, Case{5, 8, 0, DType::kF32}}) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " channels " << c.channels << " count "
                                      << c.count << " dtype " << DTypeName(c.dtype));
    const std::vector<float> values = RandomValues(c.n * c.channels);
    std::vector<int64_t> rows(static_cast<size_t>(c.count));
    for (int64_t& r : rows) r = std::uniform_int_distribution<int64_t>(0, c.n - 1)(rng_);
    const size_t elem = c.dtype == DType::kF16 ? 2 : 4;
    std::vector<uint16_t> halves(values.size());
    for (size_t i = 0; i < values.size(); ++i) halves[i] = FloatToHalf(values[i]);
    const void* bytes = c.dtype == DType::kF16 ? static_cast<const void*>(halves.data())
                                               : static_cast<const void*>(values.data());
    std::vector<std::vector<char>> got;
    for (Backend* backend : {gpu_.get(), cpu.get()}) {
      auto src = backend->Allocate(Shape{c.n, c.channels}, c.dtype);
      auto dst = backend->Allocate(Shape{c.count, c.channels}, c.dtype);
      ASSERT_TRUE(src.ok() && dst.ok());
      ASSERT_TRUE(backend->CopyFromHost(bytes, values.size() * elem, *src).ok());
      const absl::Status status = backend->GatherRows(*src, rows, *dst);
      ASSERT_TRUE(status.ok()) << status;
      got.emplace_back(dst->size_bytes());
      ASSERT_TRUE(backend->CopyToHost(*dst, got.back().data(), dst->size_bytes()).ok());
    }
    EXPECT_EQ(got[0], got[1]);
  }
  auto src = gpu_->Allocate(Shape{4, 384}, DType::kF32);
  auto dst = gpu_->Allocate(Shape{2, 384}, DType::kF32);
  ASSERT_TRUE(src.ok() && dst.ok());
  EXPECT_EQ(gpu_->GatherRows(*src, std::vector<int64_t>{0, 4}, *dst).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->GatherRows(*src, std::vector<int64_t>{-1, 0}, *dst).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->GatherRows(*src, std::vector<int64_t>{0}, *dst).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

}  // namespace
}  // namespace waav
