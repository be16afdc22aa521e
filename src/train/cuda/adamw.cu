// AdamW (PyTorch's formula, decoupled weight decay) on f32 master weights, with an optional bf16 copy of the
// updated weights for the next forward. Grid-stride, 4 parameters per thread step with 16-byte loads when the
// pointers allow. Floor: 28 bytes per parameter (read param, grad, m, v; write param, m, v) + 2 with the bf16 copy.
#include <cmath>

#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

constexpr int kThreads = 256;

struct AdamW {
  float beta1, beta2, eps, decay;  // decay = 1 - lr * weight_decay
  float step_size;                 // lr / (1 - beta1^step)
  float inv_sqrt_bc2;              // 1 / sqrt(1 - beta2^step)
  float grad_scale;
  __device__ __forceinline__ float update(float& p, float g, float& m, float& v) const {
    g *= grad_scale;
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    const float denom = sqrtf(v) * inv_sqrt_bc2 + eps;
    p = p * decay - step_size * (m / denom);
    return p;
  }
};

template <bool VEC>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, uint16_t* pbf, int64_t n, AdamW a) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, i0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if constexpr (VEC) {
    const int64_t nv = n / 4;
    for (int64_t j = i0; j < nv; j += stride) {
      float4 p = reinterpret_cast<float4*>(param)[j], mm = reinterpret_cast<float4*>(m)[j],
             vv = reinterpret_cast<float4*>(v)[j];
      const float4 g = reinterpret_cast<const float4*>(grad)[j];
      a.update(p.x, g.x, mm.x, vv.x);
      a.update(p.y, g.y, mm.y, vv.y);
      a.update(p.z, g.z, mm.z, vv.z);
      a.update(p.w, g.w, mm.w, vv.w);
      reinterpret_cast<float4*>(param)[j] = p;
      reinterpret_cast<float4*>(m)[j] = mm;
      reinterpret_cast<float4*>(v)[j] = vv;
      if (pbf) reinterpret_cast<uint2*>(pbf)[j] = make_uint2(pack2(p.x, p.y), pack2(p.z, p.w));
    }
    done = nv * 4;
  }
  for (int64_t i = done + i0; i < n; i += stride) {
    float p = param[i], mm = m[i], vv = v[i];
    a.update(p, grad[i], mm, vv);
    param[i] = p, m[i] = mm, v[i] = vv;
    if (pbf) pbf[i] = f2bf(p);
  }
}

}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, bf16* param_bf16, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale,
                cudaStream_t stream) {
  const char* fn = "adamw_step";
  need_size(n, fn, "n", std::numeric_limits<int64_t>::max() / 8);
  need(step >= 1, fn, "step counts from 1, got " + std::to_string(step));
  need(beta1 >= 0.0f && beta1 < 1.0f, fn, "beta1 must be in [0, 1), got " + std::to_string(beta1));
  need(beta2 >= 0.0f && beta2 < 1.0f, fn, "beta2 must be in [0, 1), got " + std::to_string(beta2));
  need(eps > 0.0f, fn, "eps must be > 0, got " + std::to_string(eps));
  if (n == 0) return;
  need_ptr(param, fn, "param");
  need_ptr(grad, fn, "grad");
  need_ptr(m, fn, "m");
  need_ptr(v, fn, "v");
  AdamW a;
  a.beta1 = beta1, a.beta2 = beta2, a.eps = eps, a.grad_scale = grad_scale;
  a.decay = float(1.0 - double(lr) * double(weight_decay));
  // Bias corrections in f64 on the host: 1 - beta^step loses digits in f32 for beta2 = 0.999... and small steps.
  const double bc1 = 1.0 - std::pow(double(beta1), double(step)), bc2 = 1.0 - std::pow(double(beta2), double(step));
  a.step_size = float(double(lr) / bc1);
  a.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  uint16_t* pbf = param_bf16 ? bits(param_bf16) : nullptr;
  // uint2 stores of the bf16 copy need 8-byte alignment.
  const bool vec = aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v) &&
                   (reinterpret_cast<uintptr_t>(pbf) & 7u) == 0;
  const unsigned grid = grid_for(vec ? (n + 3) / 4 : n, kThreads);
  if (vec) adamw_kernel<true><<<grid, kThreads, 0, stream>>>(param, grad, m, v, pbf, n, a);
  else adamw_kernel<false><<<grid, kThreads, 0, stream>>>(param, grad, m, v, pbf, n, a);
  check_launch(fn);
}

}  // namespace flashkit::train::cuda
