// HostBuffer: host memory a backend hands out for large uploads (Backend::AllocateHost),
// page-locked where the device copies from it without the driver staging it first (CUDA), plain
// memory otherwise. Move-only; frees itself with the function its backend gave it.
#pragma once

#include <cstddef>
#include <utility>

namespace waav {

class HostBuffer {
 public:
  using FreeFn = void (*)(void*);

  HostBuffer() = default;
  HostBuffer(void* data, size_t bytes, FreeFn free) : data_(data), bytes_(bytes), free_(free) {}
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  HostBuffer(HostBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        free_(std::exchange(other.free_, nullptr)) {}
  HostBuffer& operator=(HostBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      free_ = std::exchange(other.free_, nullptr);
    }
    return *this;
  }
  ~HostBuffer() { Release(); }

  void* data() const { return data_; }
  size_t size_bytes() const { return bytes_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }

 private:
  void Release() {
    if (data_ != nullptr && free_ != nullptr) free_(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
  FreeFn free_ = nullptr;
};

}  // namespace waav
