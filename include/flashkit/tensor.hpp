// A non-owning view of a strided tensor (up to 4 dimensions) on some device.
// Strides are in elements. flashkit never allocates user-visible tensors: callers own memory.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "flashkit/dtype.hpp"

namespace flashkit {

enum class Device : int32_t { cpu = 0, cuda = 1 };

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int32_t device_index = 0;
  int32_t ndim = 0;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> strides{};

  // Row-major contiguous view of `shape`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::cpu);
  int64_t numel() const;
  bool is_contiguous() const;
  std::string shape_str() const;  // "[2, 128, 16, 64]"
};

}  // namespace flashkit
