// Backend::Add with b of a's trailing dims (added to each of a's leading rows: how the encoder adds
// its positional embedding to every window of a batch in one call) on the CPU, exactly against
// the sums done here, and the shapes and overlaps it refuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/kernel_test_util.h"

namespace waav {
namespace {

class BroadcastAddTest : public testing::KernelTest {
 protected:
  void SetUp() override { backend_ = CreateCpuBackend({.num_threads = 2}); }
};

TEST_F(BroadcastAddTest, AddsTrailingDimsToEveryLeadingRow) {
  struct Case {
    Shape a, b;
  };
  // Rows of 1, of an odd width (the vector loop's tail), of more than one thread's grain, a
  // scalar-like [1] and the encoder's [B, 1500, 384] against [1500, 384].
  for (const Case& c :
       {Case{{5, 1}, {1}}, Case{{3, 7}, {7}}, Case{{2, 3, 13}, {3, 13}}, Case{{4, 9000}, {9000}},
        Case{{6, 4}, {6, 4}}, Case{{3, 1500, 384}, {1500, 384}}}) {
    SCOPED_TRACE(absl::StrCat(c.a.ToString(), " + ", c.b.ToString()));
    const std::vector<float> a = Random(c.a.numel(), -3.0f, 3.0f), b = Random(c.b.numel());
    std::vector<float> want(a.size());
    for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] + b[i % b.size()];
    const Tensor ta = F32(c.a, a), tb = F32(c.b, b), ty = Poisoned(c.a);
    ASSERT_TRUE(backend_->Add(ta, tb, ty).ok());
    EXPECT_EQ(Read(ty), want);
    ASSERT_TRUE(backend_->Add(ta, tb, ta).ok());  // in place
    EXPECT_EQ(Read(ta), want);
  }
}

TEST_F(BroadcastAddTest, RefusesOtherShapesAndOverlaps) {
  const Tensor a = F32({2, 3, 4}, Random(24));
  auto refused = [&](const Tensor& b, const Tensor& y) {
    const absl::Status status = backend_->Add(a, b, y);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    return std::string(status.message());
  };
  // Leading dims, a transposed trailing shape, more dims than a, another element count.
  EXPECT_NE(refused(F32({2, 3}, Random(6)), Poisoned({2, 3, 4})).find("trailing dims"),
            std::string::npos);
  refused(F32({4, 3}, Random(12)), Poisoned({2, 3, 4}));
  refused(F32({1, 2, 3, 4}, Random(24)), Poisoned({2, 3, 4}));
  refused(F32({5}, Random(5)), Poisoned({2, 3, 4}));
  // y shaped like b, not a.
  const Tensor b = F32({3, 4}, Random(12));
  refused(b, Poisoned({3, 4}));
  // y partially over b (b a slice of a's memory, y = a): in place only when b is all of y.
  auto row = a.Slice(1, 2);
  ASSERT_TRUE(row.ok());
  auto row2d = row->Reshape({3, 4});
  ASSERT_TRUE(row2d.ok());
  refused(*row2d, a);
  // Wrong dtype and undefined tensors.
  refused(I32({3, 4}, std::vector<int32_t>(12, 1)), Poisoned({2, 3, 4}));
  EXPECT_FALSE(backend_->Add(a, Tensor(), a).ok());
  EXPECT_FALSE(backend_->Add(a, b, Tensor()).ok());
}

}  // namespace
}  // namespace waav
