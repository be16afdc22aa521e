#include "engine/cpu/ssm_ops.hpp"

#include "flashkit/ssm.hpp"

namespace flashkit::engine::cpu {
namespace {

// [1, T, cols] view of the first T rows of a row-major engine tensor (row stride ld).
TensorView rows3(const Tensor& t, int64_t T) {
  TensorView v;
  v.data = t.data;
  v.dtype = DType::f32;
  v.ndim = 3;
  v.shape = {1, T, t.cols, 0};
  v.strides = {T * t.ld, t.ld, 1, 0};
  return v;
}

TensorView flat(const Tensor& t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(t.data, DType::f32, shape);
}

}  // namespace

void causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& conv_state, const Tensor& out,
                   int64_t T, int threads) {
  const int64_t Di = x.cols, W = conv_state.cols;
  CausalConv1dArgs a;
  a.x = rows3(x, T);
  a.out = rows3(out, T);
  a.weight = flat(w, {Di, W});
  if (!bias.empty()) a.bias = flat(bias, {Di});
  a.conv_state = flat(conv_state, {1, Di, W});
  a.silu = true;
  a.impl = SsmImpl::cpu;
  a.threads = threads;
  causal_conv1d_forward(a);
}

void selective_scan(const Tensor& u, const Tensor& delta, const Tensor& B, const Tensor& C, const Tensor& z,
                    const Tensor& A, const Tensor& D, const Tensor& state, const Tensor& y, int64_t T, int threads) {
  const int64_t Di = u.cols, N = B.cols;
  SelectiveScanArgs a;
  a.u = rows3(u, T);
  a.delta = rows3(delta, T);
  a.B = rows3(B, T);
  a.C = rows3(C, T);
  a.z = rows3(z, T);
  a.y = rows3(y, T);
  a.A = flat(A, {Di, N});
  a.D = flat(D, {Di});
  a.state = flat(state, {1, Di, N});
  a.delta_softplus = true;
  a.impl = SsmImpl::cpu;
  a.threads = threads;
  selective_scan_forward(a);
}

}  // namespace flashkit::engine::cpu
