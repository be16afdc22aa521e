#include "flashkit/tensor.hpp"

#include "flashkit/error.hpp"

namespace flashkit {

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  if (shape.size() > 4) fail(Status::invalid_argument, "tensor: at most 4 dimensions are supported");
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = int32_t(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != stride) return false;
    stride *= shape[d];
  }
  return true;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (int d = 0; d < ndim; ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

}  // namespace flashkit
