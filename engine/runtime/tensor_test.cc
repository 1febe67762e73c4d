#include "engine/runtime/tensor.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace waav {
namespace {

class HostBuffer : public Buffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {}
  void* data() override { return bytes_.data(); }
  size_t size_bytes() const override { return bytes_.size(); }
  DeviceKind device() const override { return DeviceKind::kCpu; }

 private:
  std::vector<char> bytes_;
};

Tensor MakeTensor(Shape shape) {
  auto buffer = std::make_shared<HostBuffer>(static_cast<size_t>(shape.numel()) * 4);
  return Tensor(buffer, 0, std::move(shape), DType::kF32);
}

TEST(TensorTest, SliceSharesStorageAndOffsetsRows) {
  Tensor t = MakeTensor({4, 3});
  for (int i = 0; i < 12; ++i) t.data_as<float>()[i] = static_cast<float>(i);
  auto slice = t.Slice(1, 3);
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->shape(), Shape({2, 3}));
  EXPECT_EQ(slice->data_as<float>()[0], 3.0f);
  slice->data_as<float>()[0] = 42.0f;
  EXPECT_EQ(t.data_as<float>()[3], 42.0f);
}

TEST(TensorTest, SliceOutOfRangeIsAnError) {
  Tensor t = MakeTensor({4, 3});
  EXPECT_FALSE(t.Slice(3, 5).ok());
  EXPECT_FALSE(t.Slice(-1, 2).ok());
  EXPECT_FALSE(t.Slice(2, 1).ok());
}

TEST(TensorTest, ReshapeKeepsElementsAndRejectsWrongCount) {
  Tensor t = MakeTensor({2, 6});
  auto r = t.Reshape({3, 4});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data(), t.data());
  EXPECT_FALSE(t.Reshape({5, 2}).ok());
  EXPECT_EQ(t.Describe(), "f32[2, 6]");
}

}  // namespace
}  // namespace waav
