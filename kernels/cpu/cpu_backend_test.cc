// Tests of the CPU backend: every kernel against a naive double-precision reference on fresh
// random inputs, graph capture, memory and error handling.
//
// Tolerance: relative L2 error ‖out − ref‖ / ‖ref‖ <= 1e-5 for every kernel, with f32 or f16
// weights alike (f16 weights are widened exactly, so the reference uses the same values).
// Outputs are poisoned with NaN before each call, so an element the kernel forgot fails.
#include "kernels/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"
#include "engine/runtime/thread_pool.h"
#include "kernels/cpu/cpu_memory.h"
#include "tests/support/kernel_test_util.h"

namespace waav {
namespace {

using testing::Close;
using testing::GeluReference;
using testing::kKernelTolerance;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

class CpuBackendTest : public testing::KernelTest {
 protected:
  void SetUp() override { backend_ = CreateCpuBackend({.num_threads = 2}); }
};

// ---- Registry, memory, thread pool --------------------------------------------------------------

TEST(CpuBackendRegistryTest, CreatedByName) {
  auto backend = CreateBackend("cpu", {.num_threads = 1});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
  EXPECT_EQ((*backend)->device(), DeviceKind::kCpu);
  EXPECT_NE((*backend)->Describe().find("1 threads"), std::string::npos) << (*backend)->Describe();
  for (Op op : {Op::kLinear, Op::kConv1d, Op::kLayerNorm, Op::kAdd, Op::kGelu, Op::kAttention,
                Op::kWriteRows, Op::kEmbed, Op::kLogSoftmax, Op::kGraphCapture}) {
    EXPECT_TRUE((*backend)->supports(op));
  }
  // The optional fusions and f16 activations are not offered: the engine keeps its f32 op-by-op
  // path on the CPU, bit for bit.
  for (Op op : {Op::kLinearResidual, Op::kLinearPlanes, Op::kLinearPlanesAppend,
                Op::kHalfActivations, Op::kDecoderStep}) {
    EXPECT_FALSE((*backend)->supports(op)) << static_cast<int>(op);
  }
  std::vector<std::string> names = RegisteredBackends();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu"), names.end());
  EXPECT_EQ(CreateBackend("cpu", {.num_threads = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendTest, AllocationsAreAlignedAndPooled) {
  void* first = nullptr;
  {
    auto t = backend_->Allocate({3, 5}, DType::kF32);
    ASSERT_TRUE(t.ok()) << t.status();
    first = t->data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % cpu::kCpuAlignment, 0u);
  }
  auto again = backend_->Allocate({5, 3}, DType::kI32);  // same byte size: same block
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), first);
  auto other = backend_->Allocate({1000}, DType::kF16);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(other->data()) % cpu::kCpuAlignment, 0u);
  EXPECT_EQ(backend_->Allocate({2, -1}, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Allocate({int64_t{1} << 40, int64_t{1} << 40}, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = backend_->Allocate({0, 7}, DType::kF32);
  EXPECT_TRUE(empty.ok()) << empty.status();
}

TEST(CpuMemoryPoolTest, SizeClassesBoundWaste) {
  for (size_t bytes : {size_t{1}, size_t{64}, size_t{65}, size_t{4096}, size_t{4097},
                       size_t{1} << 20, (size_t{1} << 20) + 1, size_t{123456789}}) {
    const size_t size = cpu::CpuMemoryPool::SizeClass(bytes);
    EXPECT_GE(size, bytes);
    EXPECT_EQ(size % cpu::kCpuAlignment, 0u);
    if (bytes > 4096) {
      EXPECT_LE(size, bytes + bytes / 8);
    }
  }
}

TEST(CpuMemoryPoolTest, BuffersOutliveTheBackend) {
  Tensor t;
  {
    std::unique_ptr<Backend> backend = CreateCpuBackend({.num_threads = 2});
    auto a = backend->Allocate({1000}, DType::kF32);
    ASSERT_TRUE(a.ok());
    t = *a;
  }
  std::memset(t.data(), 0, t.size_bytes());  // still owned (ASan would flag a use after free)
  EXPECT_EQ(t.numel(), 1000);
}

TEST_F(CpuBackendTest, CopiesCheckSizesAndDtypes) {
  std::vector<float> values = Random(12);
  Tensor a = F32({3, 4}, values);
  EXPECT_EQ(Read(a), values);
  std::vector<float> small(11);
  EXPECT_EQ(backend_->CopyToHost(a, small.data(), 11 * sizeof(float)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->CopyFromHost(small.data(), 11 * sizeof(float), a).code(),
            absl::StatusCode::kInvalidArgument);
  Tensor b = Poisoned({4, 3});
  ASSERT_TRUE(backend_->Copy(a, b).ok());
  EXPECT_EQ(Read(b), values);
  auto c = backend_->Allocate({12}, DType::kI32);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(backend_->Copy(a, *c).code(), absl::StatusCode::kInvalidArgument);
  Tensor d = Poisoned({13});
  EXPECT_EQ(backend_->Copy(a, d).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Copy(Tensor(), d).code(), absl::StatusCode::kInvalidArgument);
}

// Backend's default AllocateHost and CopyFromHostAsync (plain memory, CopyFromHost): the first
// `bytes` of the buffer arrive, or those from an offset; short buffers, offsets past what it
// holds, wrong sizes and copies while capturing are refused.
TEST_F(CpuBackendTest, HostBuffersUploadTheirFirstBytes) {
  auto empty = backend_->AllocateHost(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  EXPECT_EQ(empty->size_bytes(), 0u);
  auto host = backend_->AllocateHost(13 * sizeof(float));
  ASSERT_TRUE(host.ok());
  ASSERT_EQ(host->size_bytes(), 13 * sizeof(float));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(host->data()) % 64, 0u);
  const std::vector<float> values = Random(13);
  std::memcpy(host->data(), values.data(), 13 * sizeof(float));
  Tensor a = Poisoned({3, 4});
  ASSERT_TRUE(backend_->CopyFromHostAsync(*host, 12 * sizeof(float), a).ok());
  ASSERT_TRUE(backend_->Synchronize().ok());
  EXPECT_EQ(Read(a), std::vector<float>(values.begin(), values.begin() + 12));
  ASSERT_TRUE(backend_->CopyFromHostAsync(*host, 12 * sizeof(float), a, sizeof(float)).ok());
  EXPECT_EQ(Read(a), std::vector<float>(values.begin() + 1, values.end()));
  for (size_t offset : {2 * sizeof(float), 14 * sizeof(float), ~size_t{0}}) {
    EXPECT_EQ(backend_->CopyFromHostAsync(*host, 12 * sizeof(float), a, offset).code(),
              absl::StatusCode::kInvalidArgument);
  }
  Tensor b = Poisoned({14});
  EXPECT_EQ(backend_->CopyFromHostAsync(*host, 14 * sizeof(float), b).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->CopyFromHostAsync(*host, 13 * sizeof(float), a).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->CopyFromHostAsync(*empty, 12 * sizeof(float), a).code(),
            absl::StatusCode::kInvalidArgument);
  // Moved: the buffer goes with it (freed once, by `moved`).
  HostBuffer moved = std::move(*host);
  ASSERT_TRUE(backend_->BeginCapture().ok());
  EXPECT_EQ(backend_->CopyFromHostAsync(moved, 12 * sizeof(float), a).code(),
            absl::StatusCode::kFailedPrecondition);
  (void)backend_->EndCapture();
}

// Backend's default CopyToHostAsync and WaitForCopy (a CopyToHost, done on return; ticket 0):
// the bytes land at the offset; buffers too short, offsets past them, empty buffers, tickets
// never issued and copies while capturing are refused.
TEST_F(CpuBackendTest, HostBuffersDownloadAtAnOffset) {
  auto host = backend_->AllocateHost(16 * sizeof(float));
  ASSERT_TRUE(host.ok());
  std::fill_n(host->data_as<float>(), 16, -1.0f);
  const std::vector<float> values = Random(12);
  const Tensor a = F32({3, 4}, values);
  auto ticket = backend_->CopyToHostAsync(a, *host, 3 * sizeof(float));
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  EXPECT_EQ(*ticket, 0u);
  ASSERT_TRUE(backend_->WaitForCopy(*ticket).ok());
  const float* got = host->data_as<float>();
  EXPECT_EQ(std::vector<float>(got + 3, got + 15), values);
  EXPECT_EQ(got[2], -1.0f);
  EXPECT_EQ(got[15], -1.0f);
  for (size_t offset : {5 * sizeof(float), 17 * sizeof(float), ~size_t{0}}) {
    EXPECT_EQ(backend_->CopyToHostAsync(a, *host, offset).status().code(),
              absl::StatusCode::kInvalidArgument)
        << offset;
  }
  auto empty = backend_->AllocateHost(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(backend_->CopyToHostAsync(a, *empty).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->CopyToHostAsync(Tensor(), *host).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->WaitForCopy(1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(backend_->BeginCapture().ok());
  EXPECT_EQ(backend_->CopyToHostAsync(a, *host).status().code(),
            absl::StatusCode::kFailedPrecondition);
  (void)backend_->EndCapture();
}

// Backend's default GatherRows (one Copy per row), which the CPU backend keeps: rows in any
// order and repeated, and the refusals (indices outside src, shapes, dtypes, overlap).
TEST_F(CpuBackendTest, GatherRowsCopiesTheIndexedRows) {
  const std::vector<float> values = Random(5 * 3);
  const Tensor src = F32({5, 3}, values);
  const std::vector<int64_t> rows = {4, 0, 4, 2};
  Tensor dst = Poisoned({4, 3});
  ASSERT_TRUE(backend_->GatherRows(src, rows, dst).ok());
  std::vector<float> want;
  for (int64_t r : rows)
    want.insert(want.end(), values.begin() + r * 3, values.begin() + r * 3 + 3);
  EXPECT_EQ(Read(dst), want);
  Tensor none = Poisoned({0, 3});
  EXPECT_TRUE(backend_->GatherRows(src, {}, none).ok());
  constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  const std::vector<int64_t> past = {0, 5}, negative = {-1, 0};
  Tensor two = Poisoned({2, 3});
  EXPECT_EQ(backend_->GatherRows(src, past, two).code(), kInvalid);
  EXPECT_EQ(backend_->GatherRows(src, negative, two).code(), kInvalid);
  EXPECT_EQ(backend_->GatherRows(src, rows, two).code(), kInvalid);               // dst rows
  EXPECT_EQ(backend_->GatherRows(src, rows, Poisoned({4, 2})).code(), kInvalid);  // width
  EXPECT_EQ(backend_->GatherRows(src, rows, I32({4, 3}, std::vector<int32_t>(12))).code(),
            kInvalid);                                                                    // dtype
  EXPECT_EQ(backend_->GatherRows(src.Reshape({15}).value(), {}, none).code(), kInvalid);  // rank
  EXPECT_EQ(backend_->GatherRows(src, std::vector<int64_t>{0}, src.Slice(1, 2).value()).code(),
            kInvalid);  // dst overlaps src
  EXPECT_EQ(backend_->GatherRows(src, rows, Tensor()).code(), kInvalid);
}

// A buffer that claims to live on a GPU, to check device validation.
class FakeCudaBuffer : public Buffer {
 public:
  explicit FakeCudaBuffer(size_t bytes) : storage_(bytes) {}
  void* data() override { return storage_.data(); }
  size_t size_bytes() const override { return storage_.size(); }
  DeviceKind device() const override { return DeviceKind::kCuda; }

 private:
  std::vector<char> storage_;
};

TEST_F(CpuBackendTest, RejectsTensorsOfOtherDevices) {
  Tensor gpu(std::make_shared<FakeCudaBuffer>(64), 0, Shape{16}, DType::kF32);
  Tensor cpu = Poisoned({16});
  absl::Status status = backend_->Add(gpu, cpu, cpu);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("cuda"), std::string::npos) << status;
}

TEST(ThreadPoolTest, CoversEachIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
      for (int64_t grain : {1, 4, 64}) {
        SCOPED_TRACE(absl::StrCat(threads, " threads, n=", n, " grain=", grain));
        std::vector<int> hits(static_cast<size_t>(n), 0);
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        std::vector<int> busy(static_cast<size_t>(threads), 0);
        pool.ParallelForIndexed(
            n,
            [&](int thread, int64_t begin, int64_t end) {
              ASSERT_GE(thread, 0);
              ASSERT_LT(thread, threads);
              {
                std::lock_guard lock(mu);
                chunks.emplace_back(begin, end);
                ASSERT_EQ(busy[static_cast<size_t>(thread)]++, 0)
                    << "participant used twice at once";
              }
              for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
              std::lock_guard lock(mu);
              --busy[static_cast<size_t>(thread)];
            },
            grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << i;
        EXPECT_LE(chunks.size(), static_cast<size_t>(threads));
        for (const auto& [begin, end] : chunks) {
          if (n >= grain) {
            EXPECT_GE(end - begin, grain);
          }
        }
      }
    }
  }
}

TEST(ThreadPoolTest, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::vector<int> hits(100, 0);
  pool.ParallelFor(2, [&](int64_t begin, int64_t end) {
    for (int64_t outer = begin; outer < end; ++outer) {
      pool.ParallelFor(50, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(outer * 50 + i)];
      });
    }
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

// ---- Linear and Conv1d -------------------------------------------------------------------------

// Also sets `*floor` to 1/100 of ‖Σ|x·w| + |bias|‖, the scale of the sums' rounding error.
std::vector<double> LinearReference(const std::vector<float>& x, const std::vector<float>& w,
                                    const std::vector<float>* bias, bool gelu, int64_t m, int64_t k,
                                    int64_t n, double* floor = nullptr) {
  std::vector<double> y(static_cast<size_t>(m * n));
  double magnitude = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? (*bias)[static_cast<size_t>(j)] : 0.0;
      double abs_sum = std::abs(acc);
      for (int64_t p = 0; p < k; ++p) {
        const double term = static_cast<double>(x[static_cast<size_t>(i * k + p)]) *
                            w[static_cast<size_t>(j * k + p)];
        acc += term;
        abs_sum += std::abs(term);
      }
      magnitude += abs_sum * abs_sum;
      y[static_cast<size_t>(i * n + j)] = gelu ? GeluReference(acc) : acc;
    }
  }
  if (floor != nullptr) *floor = 0.01 * std::sqrt(magnitude);
  return y;
}

TEST_F(CpuBackendTest, LinearMatchesReference) {
  for (DType w_dtype : {DType::kF32, DType::kF16}) {
    for (bool bias_and_gelu : {false, true}) {
      for (int64_t m : {1, 3, 17, 40, 300}) {  // 1..32: GEMV tiles; more: sgemm
        for (int64_t k : {384, 240}) {
          for (int64_t n : {1, 7, 384, 1536}) {
            SCOPED_TRACE(absl::StrCat("w ", Name(w_dtype), " M=", m, " K=", k, " N=", n,
                                      bias_and_gelu ? " bias+gelu" : ""));
            std::vector<float> x = Random(m * k), w = Random(n * k, -0.2f, 0.2f), b = Random(n);
            Tensor tx = F32({m, k}, x), tw = Weight({n, k}, w, w_dtype), tb = F32({n}, b);
            Tensor ty = Poisoned({m, n});
            ASSERT_TRUE(backend_
                            ->Linear(tx, tw, bias_and_gelu ? &tb : nullptr,
                                     bias_and_gelu ? Activation::kGelu : Activation::kNone, ty)
                            .ok());
            double floor = 0;
            const std::vector<double> ref =
                LinearReference(x, w, bias_and_gelu ? &b : nullptr, bias_and_gelu, m, k, n, &floor);
            EXPECT_TRUE(Close(Read(ty), ref, kKernelTolerance, floor));
          }
        }
      }
    }
  }
}

TEST_F(CpuBackendTest, LinearTakesLeadingDims) {
  const int64_t k = 24, n = 10;
  std::vector<float> x = Random(2 * 5 * k), w = Random(n * k), b = Random(n);
  Tensor ty = Poisoned({2, 5, n});
  Tensor tb = F32({n}, b);
  ASSERT_TRUE(
      backend_
          ->Linear(F32({2, 5, k}, x), Weight({n, k}, w, DType::kF16), &tb, Activation::kNone, ty)
          .ok());
  EXPECT_TRUE(Close(Read(ty), LinearReference(x, w, &b, false, 10, k, n)));
}

struct ConvCase {
  int64_t batch, time, cin, cout, kernel;
  int stride, padding;
};

TEST_F(CpuBackendTest, Conv1dMatchesReference) {
  const ConvCase cases[] = {
      {1, 3000, 80, 384, 3, 1, 1},  // Whisper conv1
      {1, 301, 384, 384, 3, 2, 1},  // Whisper conv2 (shorter)
      {2, 37, 16, 24, 3, 2, 1},    {2, 20, 7, 5, 5, 3, 0}, {1, 4, 3, 2, 5, 1, 2},
  };
  for (const ConvCase& c : cases) {
    for (DType w_dtype : {DType::kF32, DType::kF16}) {
      for (bool gelu : {false, true}) {
        SCOPED_TRACE(absl::StrCat("B=", c.batch, " T=", c.time, " Cin=", c.cin, " Cout=", c.cout,
                                  " K=", c.kernel, " stride=", c.stride, " pad=", c.padding, " ",
                                  Name(w_dtype), gelu ? " gelu" : ""));
        const int64_t t_out = (c.time + 2 * c.padding - c.kernel) / c.stride + 1;
        std::vector<float> x = Random(c.batch * c.time * c.cin);
        std::vector<float> w = Random(c.cout * c.cin * c.kernel, -0.3f, 0.3f);
        std::vector<float> b = Random(c.cout);
        Tensor ty = Poisoned({c.batch, t_out, c.cout});
        ASSERT_TRUE(backend_
                        ->Conv1d(F32({c.batch, c.time, c.cin}, x),
                                 Weight({c.cout, c.cin, c.kernel}, w, w_dtype), F32({c.cout}, b),
                                 c.stride, c.padding, gelu ? Activation::kGelu : Activation::kNone,
                                 ty)
                        .ok());
        std::vector<double> ref(static_cast<size_t>(c.batch * t_out * c.cout));
        for (int64_t bi = 0; bi < c.batch; ++bi) {
          for (int64_t t = 0; t < t_out; ++t) {
            for (int64_t o = 0; o < c.cout; ++o) {
              double acc = b[static_cast<size_t>(o)];
              for (int64_t i = 0; i < c.cin; ++i) {
                for (int64_t j = 0; j < c.kernel; ++j) {
                  const int64_t in_t = t * c.stride - c.padding + j;
                  if (in_t < 0 || in_t >= c.time) continue;
                  acc += static_cast<double>(
                             x[static_cast<size_t>((bi * c.time + in_t) * c.cin + i)]) *
                         w[static_cast<size_t>((o * c.cin + i) * c.kernel + j)];
                }
              }
              ref[static_cast<size_t>((bi * t_out + t) * c.cout + o)] =
                  gelu ? GeluReference(acc) : acc;
            }
          }
        }
        EXPECT_TRUE(Close(Read(ty), ref));
      }
    }
  }
}

// ---- Row-wise and elementwise kernels ----------------------------------------------------------

TEST_F(CpuBackendTest, LayerNormMatchesReference) {
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{1, 384}, {5, 7}, {300, 384}, {3, 1}, {2, 1500}}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(absl::StrCat(rows, "x", cols, in_place ? " in place" : ""));
      // An offset mean checks that the variance does not suffer from cancellation.
      std::vector<float> x = Random(rows * cols, 40.0f, 44.0f), g = Random(cols), b = Random(cols);
      const float eps = 1e-5f;
      Tensor tx = F32({rows, cols}, x);
      Tensor ty = in_place ? tx : Poisoned({rows, cols});
      ASSERT_TRUE(backend_->LayerNorm(tx, F32({cols}, g), F32({cols}, b), eps, ty).ok());
      std::vector<double> ref(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int64_t c = 0; c < cols; ++c) mean += x[static_cast<size_t>(r * cols + c)];
        mean /= static_cast<double>(cols);
        for (int64_t c = 0; c < cols; ++c) {
          const double d = x[static_cast<size_t>(r * cols + c)] - mean;
          var += d * d;
        }
        var /= static_cast<double>(cols);
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          ref[i] = (x[i] - mean) / std::sqrt(var + eps) * g[static_cast<size_t>(c)] +
                   b[static_cast<size_t>(c)];
        }
      }
      EXPECT_TRUE(Close(Read(ty), ref));
    }
  }
}

TEST_F(CpuBackendTest, AddAndGeluMatchReference) {
  for (int64_t n : {1, 7, 384, 100003}) {
    SCOPED_TRACE(n);
    std::vector<float> a = Random(n, -6.0f, 6.0f), b = Random(n);
    Tensor ta = F32({n}, a), tb = F32({n}, b), ty = Poisoned({n});
    std::vector<double> sum(a.size()), gelu(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      sum[i] = static_cast<double>(a[i]) + b[i];
      gelu[i] = GeluReference(a[i]);
    }
    ASSERT_TRUE(backend_->Add(ta, tb, ty).ok());
    EXPECT_TRUE(Close(Read(ty), sum));
    ASSERT_TRUE(backend_->Gelu(ta, ty).ok());
    EXPECT_TRUE(Close(Read(ty), gelu));
    ASSERT_TRUE(backend_->Gelu(ta, ta).ok());  // in place
    EXPECT_TRUE(Close(Read(ta), gelu));
    ASSERT_TRUE(backend_->Add(tb, ty, tb).ok());  // in place
    std::vector<double> sum2(a.size());
    for (size_t i = 0; i < a.size(); ++i)
      sum2[i] = b[i] + static_cast<double>(static_cast<float>(gelu[i]));
    EXPECT_TRUE(Close(Read(tb), sum2));
  }
}

// The vectorised GELU element by element on a dense sweep: relative error within 1e-6 of the
// exact value everywhere, including large negative x where 1 + erf(x/√2) would cancel.
TEST_F(CpuBackendTest, GeluIsAccurateEverywhere) {
  std::vector<float> x;
  for (float v = -16.0f; v <= 16.0f; v += 1.0f / 1024) x.push_back(v);
  const float inf = std::numeric_limits<float>::infinity();
  x.insert(x.end(), {kNaN, inf, 1e-30f, -1e-30f, 0.0f});
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor ty = Poisoned({n});
  ASSERT_TRUE(backend_->Gelu(F32({n}, x), ty).ok());
  std::vector<float> y = Read(ty);
  double worst = 0;
  float worst_x = 0;
  for (int64_t i = 0; i + 5 < n; ++i) {
    const double want = GeluReference(x[static_cast<size_t>(i)]);
    const double err = std::abs(y[static_cast<size_t>(i)] - want);
    if (std::abs(want) > 1e-30 && err / std::abs(want) > worst) {
      worst = err / std::abs(want);
      worst_x = x[static_cast<size_t>(i)];
    }
    // Results below the normal f32 range (x < −13.2) may flush to zero.
    ASSERT_LE(err, 1e-6 * std::abs(want) + std::numeric_limits<float>::min())
        << "gelu(" << x[static_cast<size_t>(i)] << ") = " << y[static_cast<size_t>(i)] << ", want "
        << want;
  }
  std::cout << "worst relative error of gelu: " << worst << " at x = " << worst_x << "\n";
  EXPECT_TRUE(std::isnan(y[static_cast<size_t>(n - 5)]));
  EXPECT_EQ(y[static_cast<size_t>(n - 4)], inf);
  EXPECT_FLOAT_EQ(y[static_cast<size_t>(n - 3)], 0.5e-30f);
  EXPECT_FLOAT_EQ(y[static_cast<size_t>(n - 2)], -0.5e-30f);
  EXPECT_EQ(y[static_cast<size_t>(n - 1)], 0.0f);
}

TEST_F(CpuBackendTest, LogSoftmaxMatchesReference) {
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{1, 51864}, {3, 7}, {5, 1000}, {2, 1}, {1, 40000}}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(absl::StrCat(rows, "x", cols, in_place ? " in place" : ""));
      std::vector<float> x = Random(rows * cols, -30.0f, 30.0f);
      Tensor tx = F32({rows, cols}, x);
      Tensor ty = in_place ? tx : Poisoned({rows, cols});
      ASSERT_TRUE(backend_->LogSoftmax(tx, ty).ok());
      std::vector<double> ref(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        double max = -1e300, sum = 0;
        for (int64_t c = 0; c < cols; ++c)
          max = std::max<double>(max, x[static_cast<size_t>(r * cols + c)]);
        for (int64_t c = 0; c < cols; ++c)
          sum += std::exp(x[static_cast<size_t>(r * cols + c)] - max);
        for (int64_t c = 0; c < cols; ++c) {
          ref[static_cast<size_t>(r * cols + c)] =
              x[static_cast<size_t>(r * cols + c)] - max - std::log(sum);
        }
      }
      EXPECT_TRUE(Close(Read(ty), ref));
    }
  }
}

// ---- Attention ---------------------------------------------------------------------------------

std::vector<double> AttentionReference(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v,
                                       const std::vector<int32_t>* lengths, int64_t batch,
                                       int64_t tq, int64_t tk, int64_t heads, int64_t dim,
                                       double scale, bool causal) {
  const int64_t width = heads * dim;
  std::vector<double> out(static_cast<size_t>(batch * tq * width), 0.0);
  std::vector<double> s(static_cast<size_t>(tk));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t valid = lengths ? (*lengths)[static_cast<size_t>(b)] : tk;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t visible = causal ? std::clamp<int64_t>(valid - tq + i + 1, 0, valid) : valid;
        if (visible == 0) continue;  // sees nothing: zeros
        double max = -1e300;
        for (int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < dim; ++d) {
            dot += static_cast<double>(q[static_cast<size_t>((b * tq + i) * width + h * dim + d)]) *
                   k[static_cast<size_t>((b * tk + j) * width + h * dim + d)];
          }
          s[static_cast<size_t>(j)] = dot * scale;
          max = std::max(max, s[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j)
          sum += s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - max);
        for (int64_t d = 0; d < dim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < visible; ++j) {
            acc += s[static_cast<size_t>(j)] *
                   v[static_cast<size_t>((b * tk + j) * width + h * dim + d)];
          }
          out[static_cast<size_t>((b * tq + i) * width + h * dim + d)] = acc / sum;
        }
      }
    }
  }
  return out;
}

struct AttentionCase {
  int64_t batch, tq, tk, heads, dim;
  bool causal;
  std::vector<int32_t> lengths;  // empty: no kv_lengths tensor
};

TEST_F(CpuBackendTest, AttentionMatchesReference) {
  const AttentionCase cases[] = {
      {1, 1, 448, 6, 64, false, {}},       // decoder self-attention step, full cache
      {1, 1, 1500, 6, 64, false, {}},      // decoder cross-attention step
      {2, 1, 20, 6, 64, true, {20, 7}},    // batched step, different cache lengths
      {2, 5, 33, 3, 16, true, {33, 12}},   // few queries, causal
      {2, 3, 9, 2, 8, false, {9, 0}},      // a row with no keys: zeros
      {2, 40, 40, 2, 20, true, {40, 25}},  // many queries; Tq > valid keys in row 1
      {1, 100, 150, 4, 64, false, {90}},   // many queries, kv_lengths < Tk
      {2, 70, 70, 6, 64, true, {}},        // prefill, causal, no kv_lengths
      {1, 17, 5, 1, 3, false, {}},         // odd sizes
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("B=", c.batch, " Tq=", c.tq, " Tk=", c.tk, " H=", c.heads,
                              " D=", c.dim, c.causal ? " causal" : "",
                              c.lengths.empty() ? "" : " with kv_lengths"));
    const int64_t width = c.heads * c.dim;
    std::vector<float> q = Random(c.batch * c.tq * width), k = Random(c.batch * c.tk * width),
                       v = Random(c.batch * c.tk * width);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.dim)) * 2.0f;
    Tensor out = Poisoned({c.batch, c.tq, width});
    Tensor lengths;
    if (!c.lengths.empty()) lengths = I32({c.batch}, c.lengths);
    ASSERT_TRUE(backend_
                    ->Attention(F32({c.batch, c.tq, width}, q), F32({c.batch, c.tk, width}, k),
                                F32({c.batch, c.tk, width}, v),
                                c.lengths.empty() ? nullptr : &lengths, static_cast<int>(c.heads),
                                scale, c.causal, out)
                    .ok());
    EXPECT_TRUE(
        Close(Read(out), AttentionReference(q, k, v, c.lengths.empty() ? nullptr : &c.lengths,
                                            c.batch, c.tq, c.tk, c.heads, c.dim, scale, c.causal)));
  }
}

TEST_F(CpuBackendTest, EncoderAttentionMatchesReference) {
  const int64_t t = 1500, heads = 6, dim = 64, width = heads * dim;
  std::vector<float> q = Random(t * width), k = Random(t * width), v = Random(t * width);
  Tensor out = Poisoned({1, t, width});
  ASSERT_TRUE(backend_
                  ->Attention(F32({1, t, width}, q), F32({1, t, width}, k), F32({1, t, width}, v),
                              nullptr, heads, 0.125f, false, out)
                  .ok());
  EXPECT_TRUE(
      Close(Read(out), AttentionReference(q, k, v, nullptr, 1, t, t, heads, dim, 0.125, false)));
}

// ---- WriteRows and Embed -----------------------------------------------------------------------

TEST_F(CpuBackendTest, WriteRowsWritesOnlyItsRows) {
  const int64_t batch = 2, rows = 3, channels = 5, capacity = 10;
  std::vector<float> src = Random(batch * rows * channels),
                     dst = Random(batch * capacity * channels);
  Tensor tdst = F32({batch, capacity, channels}, dst);
  const std::vector<int32_t> positions = {0, 7};
  ASSERT_TRUE(
      backend_->WriteRows(F32({batch, rows, channels}, src), I32({batch}, positions), tdst).ok());
  std::vector<float> want = dst;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < channels; ++c) {
        want[static_cast<size_t>((b * capacity + positions[static_cast<size_t>(b)] + r) * channels +
                                 c)] = src[static_cast<size_t>((b * rows + r) * channels + c)];
      }
    }
  }
  EXPECT_EQ(Read(tdst), want);
}

TEST_F(CpuBackendTest, EmbedMatchesReference) {
  const int64_t batch = 2, time = 3, vocab = 50, max_positions = 12, channels = 19;
  for (DType tok_dtype : {DType::kF32, DType::kF16}) {
    for (DType pos_dtype : {DType::kF32, DType::kF16}) {
      SCOPED_TRACE(absl::StrCat(Name(tok_dtype), " tokens, ", Name(pos_dtype), " positions"));
      std::vector<float> tok_table = Random(vocab * channels),
                         pos_table = Random(max_positions * channels);
      Tensor ttok = Weight({vocab, channels}, tok_table, tok_dtype);
      Tensor tpos = Weight({max_positions, channels}, pos_table, pos_dtype);
      std::vector<int32_t> tokens(batch * time), starts = {0, RandomInt(0, max_positions - time)};
      for (int32_t& t : tokens) t = RandomInt(0, vocab - 1);
      Tensor y = Poisoned({batch, time, channels});
      ASSERT_TRUE(
          backend_->Embed(I32({batch, time}, tokens), I32({batch}, starts), ttok, tpos, y).ok());
      std::vector<double> ref(static_cast<size_t>(batch * time * channels));
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t t = 0; t < time; ++t) {
          for (int64_t c = 0; c < channels; ++c) {
            ref[static_cast<size_t>((b * time + t) * channels + c)] =
                static_cast<double>(tok_table[static_cast<size_t>(
                    tokens[static_cast<size_t>(b * time + t)] * channels + c)]) +
                pos_table[static_cast<size_t>((starts[static_cast<size_t>(b)] + t) * channels + c)];
          }
        }
      }
      EXPECT_TRUE(Close(Read(y), ref, 1e-7));
    }
  }
}

// ---- Graph capture ----------------------------------------------------------------------------

// A tiny decoder-like step reading i32 tensors: embed at positions, project, append to a cache,
// attend over it, then log-softmax.
struct Step {
  Tensor tokens, positions, lengths, token_table, position_table, weight, cache, embedded,
      projected, attended, logits;
};

absl::Status RunStep(Backend& backend, const Step& s) {
  RETURN_IF_ERROR(
      backend.Embed(s.tokens, s.positions, s.token_table, s.position_table, s.embedded));
  RETURN_IF_ERROR(backend.Linear(s.embedded, s.weight, nullptr, Activation::kNone, s.projected));
  RETURN_IF_ERROR(backend.WriteRows(s.projected, s.positions, s.cache));
  RETURN_IF_ERROR(
      backend.Attention(s.projected, s.cache, s.cache, &s.lengths, 2, 0.5f, true, s.attended));
  RETURN_IF_ERROR(backend.Copy(s.attended, s.logits));
  return backend.LogSoftmax(s.logits, s.logits);
}

TEST_F(CpuBackendTest, CapturedGraphReadsCurrentValuesAndMatchesEager) {
  const int64_t batch = 2, vocab = 30, max_positions = 16, channels = 8;
  std::vector<float> tok = Random(vocab * channels), pos = Random(max_positions * channels),
                     w = Random(channels * channels);
  auto make_step = [&]() {
    Step s;
    s.tokens = I32({batch, 1}, {3, 4});
    s.positions = I32({batch}, {0, 0});
    s.lengths = I32({batch}, {1, 1});
    s.token_table = Weight({vocab, channels}, tok, DType::kF16);
    s.position_table = F32({max_positions, channels}, pos);
    s.weight = F32({channels, channels}, w);
    s.cache = F32({batch, max_positions, channels},
                  std::vector<float>(batch * max_positions * channels, 0.0f));
    s.embedded = Poisoned({batch, 1, channels});
    s.projected = Poisoned({batch, 1, channels});
    s.attended = Poisoned({batch, 1, channels});
    s.logits = Poisoned({batch, 1, channels});
    return s;
  };
  Step captured = make_step(), eager = make_step();
  ASSERT_TRUE(backend_->BeginCapture().ok());
  ASSERT_TRUE(RunStep(*backend_, captured).ok());
  auto graph = backend_->EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->num_nodes(), 6);
  // Nothing ran during capture.
  for (float v : Read(captured.logits)) EXPECT_TRUE(std::isnan(v));

  for (int32_t step = 0; step < 5; ++step) {
    SCOPED_TRACE(step);
    const std::vector<int32_t> tokens = {RandomInt(0, vocab - 1), RandomInt(0, vocab - 1)};
    const std::vector<int32_t> positions = {step, 2 * step}, lengths = {step + 1, 2 * step + 1};
    for (Step* s : {&captured, &eager}) {
      ASSERT_TRUE(backend_->CopyFromHost(tokens.data(), 8, s->tokens).ok());
      ASSERT_TRUE(backend_->CopyFromHost(positions.data(), 8, s->positions).ok());
      ASSERT_TRUE(backend_->CopyFromHost(lengths.data(), 8, s->lengths).ok());
    }
    ASSERT_TRUE((*graph)->Replay().ok());
    ASSERT_TRUE(RunStep(*backend_, eager).ok());
    EXPECT_EQ(Read(captured.cache), Read(eager.cache));
    const std::vector<float> got = Read(captured.logits);
    EXPECT_EQ(got, Read(eager.logits));
    // The embedding really moved with the positions.
    std::vector<float> embedded = Read(captured.embedded);
    EXPECT_FLOAT_EQ(embedded[channels],
                    HalfToFloat(FloatToHalf(tok[static_cast<size_t>(tokens[1] * channels)])) +
                        pos[static_cast<size_t>(positions[1] * channels)]);
  }

  // A value that went out of range is an error from Replay, naming the kernel.
  const std::vector<int32_t> bad_tokens = {0, vocab};
  ASSERT_TRUE(backend_->CopyFromHost(bad_tokens.data(), 8, captured.tokens).ok());
  absl::Status status = (*graph)->Replay();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("Embed"), std::string::npos) << status;
  const std::vector<int32_t> tokens = {0, 1}, bad_positions = {0, max_positions};
  ASSERT_TRUE(backend_->CopyFromHost(tokens.data(), 8, captured.tokens).ok());
  ASSERT_TRUE(backend_->CopyFromHost(bad_positions.data(), 8, captured.positions).ok());
  EXPECT_EQ((*graph)->Replay().code(), absl::StatusCode::kInvalidArgument);

  // The graph keeps its tensors (and the backend's workers) alive on its own.
  captured = Step();
  backend_.reset();
  EXPECT_EQ((*graph)->Replay().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuBackendTest, CaptureMisuseIsFailedPrecondition) {
  EXPECT_EQ(backend_->EndCapture().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(backend_->BeginCapture().ok());
  EXPECT_EQ(backend_->BeginCapture().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend_->Allocate({4}, DType::kF32).status().code(),
            absl::StatusCode::kFailedPrecondition);
  float host[4] = {};
  auto t = cpu::AllocateCpuTensor(std::make_shared<cpu::CpuMemoryPool>(), {4}, DType::kF32);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(backend_->CopyFromHost(host, sizeof(host), *t).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend_->CopyToHost(*t, host, sizeof(host)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend_->Synchronize().code(), absl::StatusCode::kFailedPrecondition);
  // Shape errors are still reported at capture time and record nothing.
  EXPECT_EQ(backend_->Add(*t, *t, Tensor()).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(backend_->Gelu(*t, *t).ok());
  auto graph = backend_->EndCapture();
  ASSERT_TRUE(graph.ok());
  EXPECT_EQ((*graph)->num_nodes(), 1);
  EXPECT_EQ(backend_->EndCapture().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(backend_->Synchronize().ok());
}

// ---- Statistics --------------------------------------------------------------------------------

TEST_F(CpuBackendTest, StatsCountCallsReplaysAndMemory) {
  const BackendStats fresh = backend_->stats();
  EXPECT_EQ(fresh.kernel_launches, 0u);
  EXPECT_EQ(fresh.graph_replays, 0u);
  EXPECT_EQ(fresh.memory_in_use_bytes, 0u);
  EXPECT_EQ(fresh.memory_held_bytes, 0u);
  EXPECT_GT(fresh.memory_capacity_bytes, uint64_t{1} << 28);  // some host RAM

  const int64_t n = RandomInt(1, 100000);
  const uint64_t block = cpu::CpuMemoryPool::SizeClass(static_cast<size_t>(n) * 4);
  Tensor a = F32({n}, Random(n)), b = F32({n}, Random(n));
  std::optional<Tensor> y = Poisoned({n});
  EXPECT_EQ(backend_->stats().memory_in_use_bytes, 3 * block);
  EXPECT_EQ(backend_->stats().memory_held_bytes, 3 * block);
  EXPECT_EQ(backend_->stats().kernel_launches, 0u);  // copies from the host are not kernels

  const int calls = RandomInt(1, 20);
  for (int i = 0; i < calls; ++i) ASSERT_TRUE(backend_->Add(a, b, *y).ok());
  EXPECT_EQ(backend_->stats().kernel_launches, static_cast<uint64_t>(calls));
  // A call refused by validation launches nothing.
  EXPECT_FALSE(backend_->Add(a, F32({n + 1}, Random(n + 1)), *y).ok());
  EXPECT_EQ(backend_->stats().kernel_launches, static_cast<uint64_t>(calls));

  // Captured calls are not launches; each replay counts once, whatever its size.
  ASSERT_TRUE(backend_->BeginCapture().ok());
  ASSERT_TRUE(backend_->Add(a, b, *y).ok());
  ASSERT_TRUE(backend_->Gelu(*y, *y).ok());
  auto graph = backend_->EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const int replays = RandomInt(1, 10);
  for (int i = 0; i < replays; ++i) ASSERT_TRUE((*graph)->Replay().ok());
  EXPECT_EQ(backend_->stats().kernel_launches, static_cast<uint64_t>(calls));
  EXPECT_EQ(backend_->stats().graph_replays, static_cast<uint64_t>(replays));

  // A released block stops being in use but stays held by the pool's cache.
  graph->reset();
  y.reset();
  EXPECT_EQ(backend_->stats().memory_in_use_bytes, 2 * block);
  EXPECT_GE(backend_->stats().memory_held_bytes, 3 * block);

  // Another thread may read the statistics while this one submits: totals only grow.
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    uint64_t last = 0;
    while (!stop.load()) {
      const uint64_t now = backend_->stats().kernel_launches;
      EXPECT_GE(now, last);
      last = now;
    }
  });
  Tensor out = Poisoned({n});
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(backend_->Add(a, b, out).ok());
  stop.store(true);
  reader.join();
  EXPECT_EQ(backend_->stats().kernel_launches, static_cast<uint64_t>(calls + 200));
}

// ---- Validation --------------------------------------------------------------------------------

TEST_F(CpuBackendTest, KernelsRejectBadShapesDtypesAndIndices) {
  auto code = [](const absl::Status& s) { return s.code(); };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  Tensor x = F32({3, 8}, Random(24)), w = F32({5, 8}, Random(40)), y = Poisoned({3, 5});
  Tensor wrong_k = F32({5, 7}, Random(35));
  Tensor ids = I32({3, 8}, std::vector<int32_t>(24, 0));
  // Linear
  absl::Status s = backend_->Linear(x, wrong_k, nullptr, Activation::kNone, y);
  EXPECT_EQ(code(s), kInvalid);
  EXPECT_NE(s.message().find("f32[5, 7]"), std::string::npos) << s;
  EXPECT_EQ(code(backend_->Linear(ids, w, nullptr, Activation::kNone, y)), kInvalid);
  EXPECT_EQ(code(backend_->Linear(x, w, nullptr, Activation::kNone, Poisoned({3, 6}))), kInvalid);
  EXPECT_EQ(code(backend_->Linear(x, w, &x, Activation::kNone, y)), kInvalid);  // bad bias
  EXPECT_EQ(code(backend_->Linear(x, w, nullptr, Activation::kNone, x)),
            kInvalid);  // y is x's shape
  // Conv1d
  Tensor cx = F32({1, 10, 4}, Random(40)), cw = F32({6, 4, 3}, Random(72)),
         cb = F32({6}, Random(6));
  EXPECT_EQ(code(backend_->Conv1d(cx, cw, cb, 1, 1, Activation::kNone, Poisoned({1, 9, 6}))),
            kInvalid);
  EXPECT_EQ(code(backend_->Conv1d(cx, cw, cb, 0, 1, Activation::kNone, Poisoned({1, 10, 6}))),
            kInvalid);
  EXPECT_EQ(code(backend_->Conv1d(cx, F32({6, 5, 3}, Random(90)), cb, 1, 1, Activation::kNone,
                                  Poisoned({1, 10, 6}))),
            kInvalid);
  EXPECT_TRUE(backend_->Conv1d(cx, cw, cb, 1, 1, Activation::kNone, Poisoned({1, 10, 6})).ok());
  // LayerNorm, Add, Gelu, LogSoftmax
  Tensor g = F32({8}, Random(8));
  EXPECT_EQ(code(backend_->LayerNorm(x, F32({7}, Random(7)), g, 1e-5f, Poisoned({3, 8}))),
            kInvalid);
  EXPECT_EQ(code(backend_->LayerNorm(x, g, g, -1.0f, Poisoned({3, 8}))), kInvalid);
  EXPECT_EQ(code(backend_->Add(x, y, Poisoned({3, 8}))), kInvalid);
  EXPECT_EQ(code(backend_->Gelu(x, Poisoned({24}))), kInvalid);
  EXPECT_EQ(code(backend_->LogSoftmax(ids, ids)), kInvalid);
  auto sliced = x.Slice(1, 3), shifted = x.Slice(0, 2);  // partial overlap
  ASSERT_TRUE(sliced.ok() && shifted.ok());
  EXPECT_EQ(code(backend_->Gelu(*sliced, *shifted)), kInvalid);
  // Attention
  Tensor q = F32({2, 1, 8}, Random(16)), kv = F32({2, 4, 8}, Random(64)), out = Poisoned({2, 1, 8});
  Tensor lengths = I32({2}, {4, 5});
  EXPECT_EQ(code(backend_->Attention(q, kv, kv, nullptr, 3, 1.0f, false, out)), kInvalid);
  EXPECT_EQ(
      code(backend_->Attention(q, F32({2, 4, 6}, Random(48)), kv, nullptr, 2, 1.0f, false, out)),
      kInvalid);
  EXPECT_EQ(code(backend_->Attention(q, kv, kv, &q, 2, 1.0f, false, out)), kInvalid);
  EXPECT_EQ(code(backend_->Attention(q, kv, kv, nullptr, 2, kNaN, false, out)), kInvalid);
  s = backend_->Attention(q, kv, kv, &lengths, 2, 1.0f, false, out);  // kv_lengths[1] > Tk
  EXPECT_EQ(code(s), kInvalid);
  EXPECT_NE(s.message().find("kv_lengths[1] = 5"), std::string::npos) << s;
  Tensor negative = I32({2}, {-1, 2});
  EXPECT_EQ(code(backend_->Attention(q, kv, kv, &negative, 2, 1.0f, false, out)), kInvalid);
  // WriteRows
  Tensor src = F32({2, 3, 8}, Random(48)), cache = F32({2, 6, 8}, Random(96));
  const std::vector<float> cache_before = Read(cache);
  EXPECT_EQ(code(backend_->WriteRows(src, I32({2}, {0, 4}), cache)), kInvalid);  // 4 + 3 > 6
  EXPECT_EQ(code(backend_->WriteRows(src, I32({2}, {-1, 0}), cache)), kInvalid);
  EXPECT_EQ(Read(cache), cache_before);  // nothing written by a failing call
  EXPECT_EQ(code(backend_->WriteRows(src, I32({2}, {0, 0}), F32({2, 6, 7}, Random(84)))), kInvalid);
  EXPECT_EQ(code(backend_->WriteRows(src, I32({3}, {0, 0, 0}), cache)), kInvalid);
  EXPECT_TRUE(backend_->WriteRows(src, I32({2}, {0, 3}), cache).ok());
  // Embed
  Tensor table = F32({10, 8}, Random(80)), pos_table = F32({4, 8}, Random(32));
  Tensor ey = Poisoned({1, 2, 8});
  Tensor start = I32({1}, {0});
  s = backend_->Embed(I32({1, 2}, {3, 10}), start, table, pos_table, ey);
  EXPECT_EQ(code(s), kInvalid);
  EXPECT_NE(s.message().find("tokens[0, 1] = 10"), std::string::npos) << s;
  EXPECT_EQ(code(backend_->Embed(I32({1, 2}, {3, -1}), start, table, pos_table, ey)), kInvalid);
  EXPECT_EQ(code(backend_->Embed(I32({1, 2}, {3, 4}), I32({1}, {3}), table, pos_table, ey)),
            kInvalid);
  EXPECT_EQ(code(backend_->Embed(I32({1, 2}, {3, 4}), start, table, F32({4, 7}, Random(28)), ey)),
            kInvalid);
  EXPECT_EQ(code(backend_->Embed(F32({1, 2}, {3, 4}), start, table, pos_table, ey)), kInvalid);
  EXPECT_TRUE(backend_->Embed(I32({1, 2}, {3, 4}), I32({1}, {2}), table, pos_table, ey).ok());
}

}  // namespace
}  // namespace waav
