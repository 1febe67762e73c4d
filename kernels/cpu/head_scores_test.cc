// Backend::HeadScores on the CPU: every item's block against the contract's arithmetic done here
// (each product and each sum rounded, in order: the same floats) and against a double reference,
// f32 and f16 keys, elements no item covers left as they were, and the calls it refuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/dtype.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/kernel_test_util.h"

namespace waav {
namespace {

// out[offset + t·keys + j] of one item, rounded as Backend::HeadScores says. The volatile
// product keeps the compiler from fusing it into the addition.
void ContractScores(const std::vector<float>& q, const std::vector<float>& k, int64_t q_len,
                    int64_t k_len, int64_t channels, int64_t head_dim, float scale,
                    const HeadScoresItem& it, std::vector<float>& out) {
  for (int64_t t = 0; t < it.queries; ++t) {
    for (int64_t j = 0; j < it.keys; ++j) {
      float sum = 0.0f;
      for (int64_t e = 0; e < head_dim; ++e) {
        const int64_t c = it.head * head_dim + e;
        volatile float product = q[static_cast<size_t>((it.row * q_len + t) * channels + c)] *
                                 k[static_cast<size_t>((it.row * k_len + j) * channels + c)];
        sum = sum + product;
      }
      out[static_cast<size_t>(it.offset + t * it.keys + j)] = sum * scale;
    }
  }
}

class HeadScoresTest : public testing::KernelTest {
 protected:
  void SetUp() override { backend_ = CreateCpuBackend({.num_threads = 3}); }
};

TEST_F(HeadScoresTest, EachItemIsTheContractsSumsAndCloseToDouble) {
  struct Case {
    int64_t batch, q_len, k_len, channels, head_dim;
    DType k_dtype;
  };
  for (const Case& c :
       {Case{2, 7, 40, 384, 64, DType::kF16}, Case{3, 5, 33, 96, 32, DType::kF32},
        Case{1, 3, 9, 30, 10, DType::kF16}, Case{4, 12, 150, 256, 64, DType::kF32}}) {
    SCOPED_TRACE(absl::StrCat("B ", c.batch, " Tq ", c.q_len, " Tk ", c.k_len, " C ", c.channels,
                              " D ", c.head_dim, " ", std::string(DTypeName(c.k_dtype))));
    const int64_t heads = c.channels / c.head_dim;
    const std::vector<float> q = Random(c.batch * c.q_len * c.channels, -2.0f, 2.0f);
    std::vector<float> k = Random(c.batch * c.k_len * c.channels, -2.0f, 2.0f);
    const Tensor tq = F32({c.batch, c.q_len, c.channels}, q);
    const Tensor tk = Weight({c.batch, c.k_len, c.channels}, k, c.k_dtype);  // k rounded for f16
    // Items of random rows, heads and sizes, packed with a gap of 3 untouched elements after
    // each; enough of them that the pool's threads share them.
    std::vector<HeadScoresItem> items;
    int64_t at = 5;
    for (int i = 0; i < 24; ++i) {
      HeadScoresItem it{.row = RandomInt(0, static_cast<int>(c.batch) - 1),
                        .head = RandomInt(0, static_cast<int>(heads) - 1),
                        .queries = RandomInt(1, static_cast<int>(c.q_len)),
                        .keys = RandomInt(1, static_cast<int>(c.k_len)),
                        .offset = at};
      at += it.queries * it.keys + 3;
      items.push_back(it);
    }
    const float scale = 0.125f;
    std::vector<float> want(static_cast<size_t>(at), 7.0f);
    std::vector<double> exact(want.size(), 7.0), magnitude(want.size(), 0.0);
    for (const HeadScoresItem& it : items) {
      ContractScores(q, k, c.q_len, c.k_len, c.channels, c.head_dim, scale, it, want);
      for (int64_t t = 0; t < it.queries; ++t) {
        for (int64_t j = 0; j < it.keys; ++j) {
          double sum = 0, size = 0;
          for (int64_t e = 0; e < c.head_dim; ++e) {
            const int64_t col = it.head * c.head_dim + e;
            const double term =
                static_cast<double>(
                    q[static_cast<size_t>((it.row * c.q_len + t) * c.channels + col)]) *
                k[static_cast<size_t>((it.row * c.k_len + j) * c.channels + col)];
            sum += term;
            size += std::abs(term);
          }
          exact[static_cast<size_t>(it.offset + t * it.keys + j)] = sum * scale;
          magnitude[static_cast<size_t>(it.offset + t * it.keys + j)] = size * scale;
        }
      }
    }
    const Tensor out = F32({at}, std::vector<float>(static_cast<size_t>(at), 7.0f));
    ASSERT_TRUE(backend_->HeadScores(tq, tk, static_cast<int>(c.head_dim), scale, items, out).ok());
    const std::vector<float> got = Read(out);
    EXPECT_EQ(got, want);  // bit for bit, the untouched 7s included
    EXPECT_TRUE(testing::CloseToScale(got, exact, magnitude));
  }
}

TEST_F(HeadScoresTest, NoItemsWritesNothing) {
  const Tensor q = F32({1, 2, 8}, Random(16)), k = F32({1, 3, 8}, Random(24));
  const Tensor out = F32({4}, {1, 2, 3, 4});
  ASSERT_TRUE(backend_->HeadScores(q, k, 4, 1.0f, {}, out).ok());
  EXPECT_EQ(Read(out), (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(HeadScoresTest, RefusesBadCalls) {
  const Tensor q = F32({2, 4, 16}, Random(128)), k = F32({2, 6, 16}, Random(192));
  const Tensor out = Poisoned({100});
  const HeadScoresItem fine{.row = 1, .head = 3, .queries = 4, .keys = 6, .offset = 76};
  ASSERT_TRUE(backend_->HeadScores(q, k, 4, 0.5f, {&fine, 1}, out).ok());
  struct Bad {
    std::string why;
    Tensor q, k, out;
    int head_dim;
    float scale;
    std::vector<HeadScoresItem> items;
  };
  auto item = [&](auto change) {
    HeadScoresItem it = fine;
    change(it);
    return std::vector<HeadScoresItem>{it};
  };
  const Tensor half_q = backend_->Allocate({2, 4, 16}, DType::kF16).value();
  const std::vector<Bad> bad = {
      {"f16 queries", half_q, k, out, 4, 0.5f, {fine}},
      {"i32 keys", q, backend_->Allocate({2, 6, 16}, DType::kI32).value(), out, 4, 0.5f, {fine}},
      {"keys of rank 2", q, F32({12, 16}, Random(192)), out, 4, 0.5f, {fine}},
      {"other batch", q, F32({3, 6, 16}, Random(288)), out, 4, 0.5f, {fine}},
      {"other width", q, F32({2, 6, 8}, Random(96)), out, 4, 0.5f, {fine}},
      {"f16 out", q, k, backend_->Allocate({100}, DType::kF16).value(), 4, 0.5f, {fine}},
      {"head_dim 0", q, k, out, 0, 0.5f, {fine}},
      {"head_dim over the width", q, k, out, 17, 0.5f, {fine}},
      {"scale inf", q, k, out, 4, 1.0f / 0.0f, {fine}},
      {"row -1", q, k, out, 4, 0.5f, item([](auto& it) { it.row = -1; })},
      {"row 2", q, k, out, 4, 0.5f, item([](auto& it) { it.row = 2; })},
      {"head 4 of 4", q, k, out, 4, 0.5f, item([](auto& it) { it.head = 4; })},
      {"no queries", q, k, out, 4, 0.5f, item([](auto& it) { it.queries = 0; })},
      {"5 queries of 4", q, k, out, 4, 0.5f, item([](auto& it) { it.queries = 5; })},
      {"7 keys of 6", q, k, out, 4, 0.5f, item([](auto& it) { it.keys = 7; })},
      {"negative offset", q, k, out, 4, 0.5f, item([](auto& it) { it.offset = -1; })},
      {"past the end", q, k, out, 4, 0.5f, item([](auto& it) { it.offset = 77; })},
      {"offset overflowing", q, k, out, 4, 0.5f,
       item([](auto& it) { it.offset = int64_t{1} << 62; })},
      {"overlapping items",
       q,
       k,
       out,
       4,
       0.5f,
       {fine, {.row = 0, .head = 0, .queries = 1, .keys = 2, .offset = 75}}},
      {"out over q", q, k, q, 4, 0.5f, item([](auto& it) { it.offset = 0; })},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.why);
    const absl::Status status = backend_->HeadScores(b.q, b.k, b.head_dim, b.scale, b.items, b.out);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("HeadScores"), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace waav
