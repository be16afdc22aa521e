// See gemv_quant.hpp. The GEMV's inner loop is quant_dot.cuh (whole words per lane, scales once per group of
// values). The panel dequantization and the embedding gather compute value i of a block from the format's
// definition (the same as model/quant.cpp's loops, indexed by value instead): one thread per value.
#include "engine/cuda/common.cuh"
#include "engine/cuda/gemv_quant.hpp"
#include "engine/cuda/quant_dot.cuh"

#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

namespace flashkit::engine::cuda {
namespace {

using model::WeightType;
using quant::half_at;
using quant::k_scale_min;
using quant::Layout;

// Value i of block b.
template <WeightType TYPE>
__device__ __forceinline__ float value(const uint8_t* b, int i) {
  if constexpr (TYPE == WeightType::q8_0) {
    return half_at(b) * float(int8_t(b[2 + i]));
  } else if constexpr (TYPE == WeightType::q4_0) {
    const int q = i < 16 ? (b[2 + i] & 15) : (b[2 + i - 16] >> 4);
    return half_at(b) * float(q - 8);
  } else if constexpr (TYPE == WeightType::q4_k || TYPE == WeightType::q5_k) {
    constexpr bool kFive = TYPE == WeightType::q5_k;
    const uint8_t* qs = b + (kFive ? 48 : 16);
    const int g = i / 64, r = i % 64;
    int q = r < 32 ? (qs[32 * g + r] & 15) : (qs[32 * g + r - 32] >> 4);
    if constexpr (kFive) q |= ((b[16 + i % 32] >> (i / 32)) & 1) << 4;
    int sc, mn;
    k_scale_min(b + 4, i / 32, &sc, &mn);
    return half_at(b) * float(sc) * float(q) - half_at(b + 2) * float(mn);
  } else {  // Q6_K
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    const uint8_t lowbyte = b[64 * h + l + 32 * (k & 1)];
    const int low = k < 2 ? (lowbyte & 15) : (lowbyte >> 4);
    const int q = (low | (((b[128 + 32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
    return half_at(b + 208) * float(int8_t(b[192 + i / 16])) * float(q);
  }
}

// One warp per output row: each lane accumulates its share of the row (quant_dot.cuh), the warp reduces. NORM: x is
// the raw row; the lanes also sum x^2, and the dot product is scaled by the row's 1 / rms; warp 0 of block 0 writes
// the normed rows when f.norm_out is set.
template <WeightType TYPE, int T, bool NORM>
__global__ void gemv_quant_kernel(const float* __restrict__ x, int64_t ldx, const uint8_t* __restrict__ W, int64_t N,
                                  int64_t K, float* __restrict__ out, int64_t ldo, QuantGemvFusion f) {
  using L = Layout<TYPE>;
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  pdl_wait();
  if (n >= N) return;
  const int64_t nb = K / L::kValues;
  float acc[T], sq[T];
#pragma unroll
  for (int t = 0; t < T; ++t) acc[t] = 0.f, sq[t] = 0.f;
  quant::lane_dot<TYPE, T, NORM>(W + n * nb * L::kBytes, nb, quant::XIn<NORM>{x, ldx, f.norm_w, sq}, lane, acc);
#pragma unroll
  for (int t = 0; t < T; ++t) {
    float s = warp_sum(acc[t]);
    if constexpr (NORM) {
      const float r = rsqrtf(warp_sum(sq[t]) / float(K) + f.eps);  // every lane holds it after the butterfly
      s *= r;
      if (n == 0 && f.norm_out)
        for (int64_t k = lane; k < K; k += 32) f.norm_out[t * f.ld_norm_out + k] = x[t * ldx + k] * r * f.norm_w[k];
    }
    if (lane == 0) {
      out[t * ldo + n] = s;
      if (f.add_to) f.add_to[t * f.ld_add + n] += s;
    }
  }
}

// gate|up with the gated activation, T = 1 (see gemv_quant_gated).
template <WeightType TYPE, bool NORM>
__global__ void gemv_quant_gated_kernel(const float* __restrict__ x, const uint8_t* __restrict__ Wg,
                                        const uint8_t* __restrict__ Wu, int64_t F, int64_t K, float* __restrict__ gu,
                                        float* __restrict__ act_out, Act act, QuantGemvFusion f) {
  using L = Layout<TYPE>;
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  pdl_wait();
  if (n >= F) return;
  const int64_t nb = K / L::kValues;
  float ag[1] = {0.f}, au[1] = {0.f}, sq[1] = {0.f}, sq_up[1] = {0.f};
  quant::lane_dot<TYPE, 1, NORM>(Wg + n * nb * L::kBytes, nb, quant::XIn<NORM>{x, K, f.norm_w, sq}, lane, ag);
  quant::lane_dot<TYPE, 1, NORM>(Wu + n * nb * L::kBytes, nb, quant::XIn<NORM>{x, K, f.norm_w, sq_up}, lane, au);
  float g = warp_sum(ag[0]), u = warp_sum(au[0]);
  if constexpr (NORM) {
    const float r = rsqrtf(warp_sum(sq[0]) / float(K) + f.eps);
    g *= r, u *= r;
    if (n == 0 && f.norm_out)
      for (int64_t k = lane; k < K; k += 32) f.norm_out[k] = x[k] * r * f.norm_w[k];
  }
  if (lane == 0) {
    gu[n] = g;
    gu[F + n] = u;
    act_out[n] = act_fn(act, g) * u;
  }
}

template <WeightType TYPE, int T>
void launch_rows(const float* x, int64_t ldx, const uint8_t* W, int64_t N, int64_t K, float* out, int64_t ldo,
                 cudaStream_t stream, const QuantGemvFusion& f) {
  constexpr int kWarps = 4;
  const dim3 grid(unsigned((N + kWarps - 1) / kWarps));
  if (f.norm_w)
    launch("gemv_quant", gemv_quant_kernel<TYPE, T, true>, grid, dim3(32 * kWarps), 0, stream, x, ldx, W, N, K, out,
           ldo, f);
  else
    launch("gemv_quant", gemv_quant_kernel<TYPE, T, false>, grid, dim3(32 * kWarps), 0, stream, x, ldx, W, N, K, out,
           ldo, f);
}

template <WeightType TYPE>
void launch_type(const float* x, int64_t ldx, int T, const uint8_t* W, int64_t N, int64_t K, float* out, int64_t ldo,
                 cudaStream_t stream, const QuantGemvFusion& f) {
  switch (T) {
    case 1: return launch_rows<TYPE, 1>(x, ldx, W, N, K, out, ldo, stream, f);
    case 2: return launch_rows<TYPE, 2>(x, ldx, W, N, K, out, ldo, stream, f);
    case 3: return launch_rows<TYPE, 3>(x, ldx, W, N, K, out, ldo, stream, f);
    case 4: return launch_rows<TYPE, 4>(x, ldx, W, N, K, out, ldo, stream, f);
    case 5: return launch_rows<TYPE, 5>(x, ldx, W, N, K, out, ldo, stream, f);
    case 6: return launch_rows<TYPE, 6>(x, ldx, W, N, K, out, ldo, stream, f);
    case 7: return launch_rows<TYPE, 7>(x, ldx, W, N, K, out, ldo, stream, f);
    default: return launch_rows<TYPE, 8>(x, ldx, W, N, K, out, ldo, stream, f);
  }
}

// One thread per value: value i of the panel (row i / K, column i % K).
template <WeightType TYPE>
__global__ void dequantize_bf16_kernel(const uint8_t* __restrict__ W, int64_t n, int64_t K, uint16_t* __restrict__ out) {
  using L = Layout<TYPE>;
  pdl_trigger();
  pdl_wait();  // the previous GEMM may still read `out`
  const int64_t nb = K / L::kValues;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, k = i % K;
    out[i] = f2bf(value<TYPE>(W + (r * nb + k / L::kValues) * L::kBytes, int(k % L::kValues)));
  }
}

template <WeightType TYPE, bool OBF>
__global__ void embed_quant_kernel(const uint8_t* __restrict__ W, int64_t vocab, int64_t K,
                                   const int32_t* __restrict__ tokens, void* __restrict__ out, int64_t ldo, float scale) {
  using L = Layout<TYPE>;
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.y;
  const int32_t id = tokens[t];
  const bool ok = id >= 0 && id < vocab;
  const int64_t nb = K / L::kValues;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < K; k += int64_t(gridDim.x) * blockDim.x) {
    const float v = ok ? value<TYPE>(W + (int64_t(id) * nb + k / L::kValues) * L::kBytes, int(k % L::kValues)) * scale
                       : __int_as_float(0x7fc00000);
    if constexpr (OBF) static_cast<uint16_t*>(out)[t * ldo + k] = f2bf(v);
    else static_cast<float*>(out)[t * ldo + k] = v;
  }
}

// Calls f(integral_constant-like tag) with the kernel type of `type`.
template <class F>
void with_type(WeightType type, const char* what, F&& f) {
  switch (type) {
    case WeightType::q8_0: return f(std::integral_constant<WeightType, WeightType::q8_0>{});
    case WeightType::q4_0: return f(std::integral_constant<WeightType, WeightType::q4_0>{});
    case WeightType::q4_k: return f(std::integral_constant<WeightType, WeightType::q4_k>{});
    case WeightType::q5_k: return f(std::integral_constant<WeightType, WeightType::q5_k>{});
    case WeightType::q6_k: return f(std::integral_constant<WeightType, WeightType::q6_k>{});
    default: fail(Status::invalid_argument, std::string(what) + ": not a quantized type: " + weight_type_name(type));
  }
}

}  // namespace

void dequantize_bf16(const uint8_t* W, model::WeightType type, int64_t rows, int64_t K, uint16_t* out,
                     cudaStream_t stream) {
  const int64_t n = rows * K;
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(sm_count()) * 32));
  with_type(type, "dequantize_bf16", [&](auto tag) {
    launch("dequantize_bf16", dequantize_bf16_kernel<decltype(tag)::value>, dim3(blocks), dim3(kThreads), 0, stream, W,
           n, K, out);
  });
}

void embed_quant(const uint8_t* W, model::WeightType type, int64_t vocab, int64_t K, const int32_t* tokens, int64_t T,
                 void* out, bool out_bf16, int64_t ldo, float scale, cudaStream_t stream) {
  if (T <= 0 || K <= 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(unsigned(std::min<int64_t>((K + kThreads - 1) / kThreads, 64)), unsigned(T));
  with_type(type, "embed_quant", [&](auto tag) {
    constexpr WeightType kType = decltype(tag)::value;
    if (out_bf16)
      launch("embed_quant", embed_quant_kernel<kType, true>, grid, dim3(kThreads), 0, stream, W, vocab, K, tokens, out,
             ldo, scale);
    else
      launch("embed_quant", embed_quant_kernel<kType, false>, grid, dim3(kThreads), 0, stream, W, vocab, K, tokens, out,
             ldo, scale);
  });
}

void gemv_quant(const float* x, int64_t ldx, int T, const uint8_t* W, model::WeightType type, int64_t N, int64_t K,
                float* out, int64_t ldo, cudaStream_t stream, const QuantGemvFusion& f) {
  with_type(type, "gemv_quant", [&](auto tag) {
    launch_type<decltype(tag)::value>(x, ldx, T, W, N, K, out, ldo, stream, f);
  });
}

void gemv_quant_gated(const float* x, const uint8_t* W_gate, const uint8_t* W_up, model::WeightType type, int64_t F,
                      int64_t K, float* gu, float* act_out, Act act, cudaStream_t stream, const QuantGemvFusion& f) {
  constexpr int kWarps = 4;
  const dim3 grid(unsigned((F + kWarps - 1) / kWarps));
  with_type(type, "gemv_quant_gated", [&](auto tag) {
    constexpr WeightType kType = decltype(tag)::value;
    if (f.norm_w)
      launch("gemv_quant_gated", gemv_quant_gated_kernel<kType, true>, grid, dim3(32 * kWarps), 0, stream, x, W_gate,
             W_up, F, K, gu, act_out, act, f);
    else
      launch("gemv_quant_gated", gemv_quant_gated_kernel<kType, false>, grid, dim3(32 * kWarps), 0, stream, x, W_gate,
             W_up, F, K, gu, act_out, act, f);
  });
}

}  // namespace flashkit::engine::cuda
