// Tensor: a typed, shaped, row-major view into a device buffer owned by a backend.
//
// Tensors are cheap handles: copying one shares the buffer (reference counted), so a captured
// graph that holds tensors keeps their memory alive. Views (Slice, Reshape) never copy data.
// Data is always contiguous in row-major order; a view along dimension 0 stays contiguous.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/dtype.h"

namespace waav {

// A block of memory on one device. Backends subclass it; destruction returns the memory to
// the backend's pool. `data()` is a device address (a host address for the CPU backend).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t size_bytes() const = 0;
  virtual DeviceKind device() const = 0;
};

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int64_t numel() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  bool operator==(const Shape& other) const = default;
  std::string ToString() const;  // e.g. "[1, 1500, 384]"

 private:
  std::vector<int64_t> dims_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Buffer> buffer, size_t offset_bytes, Shape shape, DType dtype);

  bool defined() const { return buffer_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  size_t size_bytes() const { return static_cast<size_t>(numel()) * SizeOf(dtype_); }
  DeviceKind device() const { return buffer_->device(); }

  void* data() const { return static_cast<char*>(buffer_->data()) + offset_bytes_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data());
  }

  // Rows [begin, end) along dimension 0, sharing the buffer.
  absl::StatusOr<Tensor> Slice(int64_t begin, int64_t end) const;
  // The same elements seen with another shape of equal element count.
  absl::StatusOr<Tensor> Reshape(Shape shape) const;
  // Human-readable description for error messages: "f32[1, 80, 3000]".
  std::string Describe() const;

 private:
  std::shared_ptr<Buffer> buffer_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

}  // namespace waav
