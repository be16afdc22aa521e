// Gated MLP activation, forward and backward, over gate_up [T, 2F] (gate columns [0, F), up columns [F, 2F)).
// One thread per (token, 8 columns) with 16-byte loads when F and the pointers allow, one column otherwise.
// Floors: forward 6 bytes per output element (read gate and up, write out), backward 10 (read dout, gate, up;
// write dgate, dup).
#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

constexpr int kThreads = 256;

constexpr float kSqrt2OverPi = 0.7978845608028654f, kGeluC = 0.044715f;

// act(g) and act'(g)
template <Act A>
__device__ __forceinline__ float act(float g) {
  if constexpr (A == Act::silu) return g / (1.0f + expf(-g));
  else return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + kGeluC * g * g * g)));
}
template <Act A>
__device__ __forceinline__ void act_and_grad(float g, float& a, float& da) {
  if constexpr (A == Act::silu) {
    const float s = 1.0f / (1.0f + expf(-g));
    a = g * s;
    da = s * (1.0f + g * (1.0f - s));
  } else {
    const float th = tanhf(kSqrt2OverPi * (g + kGeluC * g * g * g));
    a = 0.5f * g * (1.0f + th);
    da = 0.5f * (1.0f + th) + 0.5f * g * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * kGeluC * g * g);
  }
}

template <bool VEC, bool BWD, Act A>
__global__ void gated_kernel(const uint16_t* dout, const uint16_t* gu, uint16_t* out, int64_t T, int64_t F) {
  constexpr int W = VEC ? 8 : 1;
  const int64_t per_row = F / W, n = T * per_row, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += stride) {
    const int64_t t = idx / per_row, f = (idx - t * per_row) * W;
    const int64_t gi = t * 2 * F + f, ui = gi + F, oi = t * F + f;
    float g[W], u[W], d[W];
    if constexpr (VEC) {
      ld8(gu, gi, g);
      ld8(gu, ui, u);
      if constexpr (BWD) ld8(dout, oi, d);
    } else {
      g[0] = ld1(gu, gi), u[0] = ld1(gu, ui);
      if constexpr (BWD) d[0] = ld1(dout, oi);
    }
    if constexpr (BWD) {
      // dgate = dout * up * act'(gate), dup = dout * act(gate); written over gate_up's layout (may alias it: this
      // thread's loads precede its stores).
#pragma unroll
      for (int k = 0; k < W; ++k) {
        float a, da;
        act_and_grad<A>(g[k], a, da);
        g[k] = d[k] * u[k] * da;
        u[k] = d[k] * a;
      }
      if constexpr (VEC) {
        st8(out, gi, g);
        st8(out, ui, u);
      } else {
        st1(out, gi, g[0]);
        st1(out, ui, u[0]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) g[k] = act<A>(g[k]) * u[k];
      if constexpr (VEC) st8(out, oi, g);
      else st1(out, oi, g[0]);
    }
  }
}

template <bool BWD>
void gated(const char* fn, const bf16* dout, const bf16* gate_up, bf16* out, int64_t T, int64_t F, Act act,
           cudaStream_t stream) {
  need_size(T, fn, "T");
  need_size(F, fn, "F");
  need(act == Act::silu || act == Act::gelu_tanh, fn, "act must be silu or gelu_tanh");
  if (T == 0 || F == 0) return;
  if (BWD) need_ptr(dout, fn, "dout");
  need_ptr(gate_up, fn, "gate_up");
  need_ptr(out, fn, BWD ? "dgate_up" : "out");
  const bool vec = F % 8 == 0 && aligned16(gate_up) && aligned16(out) && (!BWD || aligned16(dout));
  const unsigned grid = grid_for(T * (vec ? F / 8 : F), kThreads, 1 << 16);
  const uint16_t* d = BWD ? bits(dout) : nullptr;
  auto kern = act == Act::silu ? (vec ? gated_kernel<true, BWD, Act::silu> : gated_kernel<false, BWD, Act::silu>)
                               : (vec ? gated_kernel<true, BWD, Act::gelu_tanh> : gated_kernel<false, BWD, Act::gelu_tanh>);
  kern<<<grid, kThreads, 0, stream>>>(d, bits(gate_up), bits(out), T, F);
  check_launch(fn);
}

}  // namespace

void gated_act_fwd(const bf16* gate_up, bf16* out, int64_t T, int64_t F, Act act, cudaStream_t stream) {
  gated<false>("gated_act_fwd", nullptr, gate_up, out, T, F, act, stream);
}
void gated_act_bwd(const bf16* dout, const bf16* gate_up, bf16* dgate_up, int64_t T, int64_t F, Act act,
                   cudaStream_t stream) {
  gated<true>("gated_act_bwd", dout, gate_up, dgate_up, T, F, act, stream);
}

}  // namespace flashkit::train::cuda
