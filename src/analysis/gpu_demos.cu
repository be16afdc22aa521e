// GPU fusion demos (see gpu_demos.hpp): tanh-GELU as 8 elementwise kernels vs 1 fused kernel, and a synthetic
// batch-1 decode step run eagerly vs as a CUDA graph. Timing with CUDA events (median of `reps` after `warmup`);
// each variant is an NVTX range. Never throws: failures come back as available=false with the reason.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define FK_DEMO_NVTX 1
#endif

#include "flashkit/error.hpp"
#include "gpu_demos.hpp"

namespace flashkit::analysis {

namespace {
struct Fail {
  std::string what;
};
void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Fail{std::string(what) + ": " + cudaGetErrorString(e)};
}
void ckb(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Fail{std::string(what) + ": cuBLAS status " + std::to_string(int(s))};
}

struct Nvtx {  // scoped NVTX range (no-op without the header)
  explicit Nvtx(const char* name) {
#ifdef FK_DEMO_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~Nvtx() {
#ifdef FK_DEMO_NVTX
    nvtxRangePop();
#endif
  }
};

// Device buffers and events released on every path.
struct Res {
  std::vector<void*> bufs;
  std::vector<cudaEvent_t> events;
  ~Res() {
    for (void* p : bufs) cudaFree(p);
    for (auto e : events) cudaEventDestroy(e);
  }
  template <class T>
  T* alloc(size_t n) {
    void* p = nullptr;
    ck(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
    bufs.push_back(p);
    return static_cast<T*>(p);
  }
  cudaEvent_t event() {
    cudaEvent_t e = nullptr;
    ck(cudaEventCreate(&e), "cudaEventCreate");
    events.push_back(e);
    return e;
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double min_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  ck(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return ms;
}

std::string device_name() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return "";
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "";
  return prop.name;
}

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

__device__ __forceinline__ uint32_t mix(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return uint32_t(z >> 40);  // 24 bits
}
template <class T>
__global__ void fill_uniform(T* p, size_t n, float scale, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = from_f<T>(scale * (float(mix(i, seed)) / 16777216.0f * 2.f - 1.f));
}
template <class T>
void fill(T* p, size_t n, float scale, uint32_t seed, cudaStream_t s) {
  fill_uniform<T><<<1024, 256, 0, s>>>(p, n, scale, seed);
  ck(cudaGetLastError(), "fill kernel");
}

// ------------------------------------------------------------------ GELU
constexpr float kC0 = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kC1 = 0.044715f;

struct Cube {
  __device__ float operator()(float x) const { return x * x * x; }
};
struct MulC {
  float c;
  __device__ float operator()(float x) const { return c * x; }
};
struct AddC {
  float c;
  __device__ float operator()(float x) const { return c + x; }
};
struct Tanh {
  __device__ float operator()(float x) const { return tanhf(x); }
};
struct Add {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct Mul {
  __device__ float operator()(float x, float y) const { return x * y; }
};
struct GeluFused {
  __device__ float operator()(float x) const { return 0.5f * x * (1.f + tanhf(kC0 * (x + kC1 * x * x * x))); }
};

// 16-byte packs: every thread moves whole 16-byte words (8 bf16 or 4 f32), grid-stride.
template <class T>
struct alignas(16) Pack {
  static constexpr int V = 16 / sizeof(T);
  T v[V];
};

template <class T, class F>
__global__ void ew1(const T* a, T* y, int64_t n, F f) {
  constexpr int V = Pack<T>::V;
  const int64_t nv = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = t0; i < nv; i += stride) {
    const Pack<T> in = reinterpret_cast<const Pack<T>*>(a)[i];
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = from_f<T>(f(to_f(in.v[k])));
    reinterpret_cast<Pack<T>*>(y)[i] = out;
  }
  for (int64_t i = nv * V + t0; i < n; i += stride) y[i] = from_f<T>(f(to_f(a[i])));
}

template <class T, class F>
__global__ void ew2(const T* a, const T* b, T* y, int64_t n, F f) {
  constexpr int V = Pack<T>::V;
  const int64_t nv = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = t0; i < nv; i += stride) {
    const Pack<T> pa = reinterpret_cast<const Pack<T>*>(a)[i], pb = reinterpret_cast<const Pack<T>*>(b)[i];
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = from_f<T>(f(to_f(pa.v[k]), to_f(pb.v[k])));
    reinterpret_cast<Pack<T>*>(y)[i] = out;
  }
  for (int64_t i = nv * V + t0; i < n; i += stride) y[i] = from_f<T>(f(to_f(a[i]), to_f(b[i])));
}

template <class T>
nlohmann::json gelu_run(int64_t n, int reps, int warmup, const cudaDeviceProp& prop) {
  Res r;
  cudaStream_t s = nullptr;  // the legacy default stream: the events below are recorded on it
  T* x = r.alloc<T>(size_t(n));
  T* y_sep = r.alloc<T>(size_t(n));
  T* y_fused = r.alloc<T>(size_t(n));
  T* a = r.alloc<T>(size_t(n));
  T* b = r.alloc<T>(size_t(n));
  fill<T>(x, size_t(n), 3.f, 11, s);
  const unsigned grid = unsigned(prop.multiProcessorCount) * 8, block = 256;
  const double e = sizeof(T);

  // Copy-bandwidth roof measured now, on the same buffers' size: cudaMemcpy device to device, read + write.
  std::vector<double> copy_ms;
  {
    cudaEvent_t c0 = r.event(), c1 = r.event();
    for (int i = 0; i < 6; ++i) {
      ck(cudaEventRecord(c0, s), "record");
      ck(cudaMemcpyAsync(a, x, size_t(n) * sizeof(T), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      ck(cudaEventRecord(c1, s), "record");
      ck(cudaEventSynchronize(c1), "sync");
      if (i) copy_ms.push_back(elapsed_ms(c0, c1));
    }
  }
  const double copy_gbs = 2.0 * double(n) * e / (min_of(copy_ms) * 1e-3) / 1e9;

  const std::vector<GeluKernel> ks = gelu_separate_kernels();
  std::vector<cudaEvent_t> ev;
  for (size_t i = 0; i <= ks.size(); ++i) ev.push_back(r.event());
  auto separate = [&](bool timed) {
    auto mark = [&](size_t i) {
      if (timed) ck(cudaEventRecord(ev[i], s), "record");
    };
    mark(0);
    ew1<T><<<grid, block, 0, s>>>(x, a, n, Cube{});
    mark(1);
    ew1<T><<<grid, block, 0, s>>>(a, a, n, MulC{kC1});
    mark(2);
    ew2<T><<<grid, block, 0, s>>>(x, a, a, n, Add{});
    mark(3);
    ew1<T><<<grid, block, 0, s>>>(a, a, n, MulC{kC0});
    mark(4);
    ew1<T><<<grid, block, 0, s>>>(a, b, n, Tanh{});
    mark(5);
    ew1<T><<<grid, block, 0, s>>>(b, b, n, AddC{1.f});
    mark(6);
    ew2<T><<<grid, block, 0, s>>>(x, b, b, n, Mul{});
    mark(7);
    ew1<T><<<grid, block, 0, s>>>(b, y_sep, n, MulC{0.5f});
    mark(8);
    ck(cudaGetLastError(), "gelu separate launch");
  };
  std::vector<std::vector<double>> per(ks.size());
  std::vector<double> sep_ms, fused_ms;
  {
    Nvtx range("gelu.separate(8 kernels)");
    for (int i = 0; i < warmup + reps; ++i) {
      separate(true);
      ck(cudaEventSynchronize(ev.back()), "sync");
      if (i < warmup) continue;
      for (size_t k = 0; k < ks.size(); ++k) per[k].push_back(elapsed_ms(ev[k], ev[k + 1]));
      sep_ms.push_back(elapsed_ms(ev.front(), ev.back()));
    }
  }
  {
    Nvtx range("gelu.fused(1 kernel)");
    for (int i = 0; i < warmup + reps; ++i) {
      ck(cudaEventRecord(ev[0], s), "record");
      ew1<T><<<grid, block, 0, s>>>(x, y_fused, n, GeluFused{});
      ck(cudaEventRecord(ev[1], s), "record");
      ck(cudaEventSynchronize(ev[1]), "sync");
      ck(cudaGetLastError(), "gelu fused launch");
      if (i >= warmup) fused_ms.push_back(elapsed_ms(ev[0], ev[1]));
    }
  }
  // Compare a prefix of both outputs on the host (the separate form rounds each intermediate to T).
  const size_t m = size_t(std::min<int64_t>(n, int64_t(1) << 20));
  std::vector<T> h1(m), h2(m);
  ck(cudaMemcpy(h1.data(), y_sep, m * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  ck(cudaMemcpy(h2.data(), y_fused, m * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  double diff = 0;
  for (size_t i = 0; i < m; ++i) {
    float u, v;
    if constexpr (sizeof(T) == 4) {
      u = float(h1[i]), v = float(h2[i]);
    } else {
      u = __bfloat162float(h1[i]), v = __bfloat162float(h2[i]);
    }
    diff = std::max(diff, double(std::fabs(u - v)));
  }

  const double dn = double(n);
  nlohmann::json kern = nlohmann::json::array();
  double flops_sep = 0;
  for (size_t k = 0; k < ks.size(); ++k) {
    const double bytes = double(ks[k].reads + ks[k].writes) * e * dn, med = median(per[k]);
    flops_sep += ks[k].flops_per_elem * dn;
    kern.push_back({{"name", "gelu.sep." + ks[k].name}, {"bytes", bytes}, {"flops", ks[k].flops_per_elem * dn},
                    {"median_ms", med}, {"gb_per_s", bytes / (med * 1e-3) / 1e9},
                    {"pct_of_copy_bw", 100.0 * bytes / (med * 1e-3) / 1e9 / copy_gbs}});
  }
  const double sep_bytes = gelu_bytes_per_elem(false, e) * dn, fused_bytes = gelu_bytes_per_elem(true, e) * dn;
  const double sm = median(sep_ms), fm = median(fused_ms);
  auto variant = [&](int kernels, double bytes, double flops, double med, const std::vector<double>& all) {
    return nlohmann::json{{"kernels", kernels}, {"bytes", bytes}, {"flops", flops}, {"median_ms", med},
                          {"min_ms", min_of(all)}, {"gb_per_s", bytes / (med * 1e-3) / 1e9},
                          {"pct_of_copy_bw", 100.0 * bytes / (med * 1e-3) / 1e9 / copy_gbs},
                          {"floor_ms_copy_bw", bytes / (copy_gbs * 1e9) * 1e3}};
  };
  nlohmann::json sep = variant(int(ks.size()), sep_bytes, flops_sep, sm, sep_ms);
  sep["per_kernel"] = kern;
  return {{"n", n}, {"dtype", sizeof(T) == 4 ? "f32" : "bf16"}, {"elem_bytes", e}, {"reps", reps}, {"warmup", warmup},
          {"copy_gbs", copy_gbs}, {"separate", sep}, {"fused", variant(1, fused_bytes, 38.0 * dn, fm, fused_ms)},
          {"bytes_ratio", sep_bytes / fused_bytes}, {"speedup", sm / fm}, {"max_abs_diff_prefix", diff},
          {"compared_elements", m},
          {"timing", "CUDA events around each kernel; median of reps after warm-up"},
          {"note", "separate = x^3, *c1, +x, *c0, tanh, +1, *x, *0.5, each a kernel reading and writing HBM "
                   "(18 tensor passes of n elements); fused = one kernel (read x, write y); 16-byte vector "
                   "loads/stores in both; copy_gbs = cudaMemcpy D2D on n elements measured in the same run"}};
}

// ------------------------------------------------------------------ decode step
using bf16 = __nv_bfloat16;

__device__ float block_sum(float v, float* red) {
  for (int w = 16; w > 0; w >>= 1) v += __shfl_xor_sync(0xffffffffu, v, w);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) t += red[w];
  return t;
}
__device__ float block_max(float v, float* red) {
  for (int w = 16; w > 0; w >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, w));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = -INFINITY;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) t = fmaxf(t, red[w]);
  return t;
}

// y = x / rms(x) * (1 + w); one block. `copy` (layer 0) also copies x into the residual stream, which makes every
// step start from the same state (eager and graph runs must give identical outputs).
template <class TO>
__global__ void rmsnorm_kernel(const float* x, const bf16* w, TO* y, float* copy, int n) {
  __shared__ float red[32];
  float ss = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  const float r = rsqrtf(block_sum(ss, red) / float(n) + 1e-6f);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = x[i];
    if (copy) copy[i] = v;
    y[i] = from_f<TO>(v * r * (1.f + __bfloat162float(w[i])));
  }
}

__global__ void add_kernel(float* h, const float* t, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) h[i] += t[i];
}

__global__ void gelu_mul_kernel(const float* g, const float* u, bf16* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float x = g[i];
    const float a = 0.5f * x * (1.f + tanhf(kC0 * (x + kC1 * x * x * x)));
    y[i] = __float2bfloat16(u ? a * u[i] : a);
  }
}

// Blocks 0..H-1: query heads; H..H+Hk-1: key heads (and their V rows). blockDim = d. Per-head RMSNorm (optional),
// rotary embedding at `pos` (pairs i, i + d/2), then q -> bf16, k and v -> the cache row `pos`.
__global__ void qk_rope_kv_kernel(const float* q, const float* k, const float* v, const bf16* qw, const bf16* kw,
                                  bf16* qout, bf16* kc, bf16* vc, int H, int Hk, int d, int pos, int qk_norm) {
  extern __shared__ float sh[];  // d floats
  __shared__ float red[32];
  const int b = blockIdx.x, t = threadIdx.x;
  const bool is_q = b < H;
  const int head = is_q ? b : b - H;
  float x = is_q ? q[head * d + t] : k[head * d + t];
  if (qk_norm) {
    const float r = rsqrtf(block_sum(x * x, red) / float(d) + 1e-6f);
    x = x * r * (1.f + __bfloat162float(is_q ? qw[t] : kw[t]));
  }
  sh[t] = x;
  __syncthreads();
  const int half = d / 2, i = t % half;
  const float inv_freq = __powf(10000.f, -2.f * float(i) / float(d)), ang = float(pos) * inv_freq;
  float sn, cs;
  __sincosf(ang, &sn, &cs);
  const float y = t < half ? x * cs - sh[t + half] * sn : x * cs + sh[t - half] * sn;
  if (is_q) {
    qout[head * d + t] = __float2bfloat16(y);
  } else {
    kc[(size_t(pos) * Hk + head) * d + t] = __float2bfloat16(y);
    vc[(size_t(pos) * Hk + head) * d + t] = __float2bfloat16(v[head * d + t]);
  }
}

// Split-K decode attention (flash-decoding): grid (heads, key chunks of kAttnChunk), 256 threads = 8 warps.
// Scores with a warp per key (16-byte loads, lanes across d), softmax within the chunk, weighted sum with a thread
// per output element; writes the chunk's unnormalized output, max and sum. Cache layout [key][kv_head][d].
constexpr int kAttnChunk = 64;
__global__ void attn_partial_kernel(const bf16* q, const bf16* kc, const bf16* vc, float* part, int H, int Hk, int d,
                                    int keys, float scale) {
  extern __shared__ float sm[];
  float* qs = sm;      // d
  float* s = sm + d;   // kAttnChunk
  __shared__ float red[32];
  const int h = blockIdx.x, split = blockIdx.y, nsplit = gridDim.y, kvh = h / (H / Hk);
  const int j0 = split * kAttnChunk, nj = min(kAttnChunk, keys - j0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int c = threadIdx.x; c < d; c += blockDim.x) qs[c] = __bfloat162float(q[h * d + c]);
  __syncthreads();
  for (int jj = warp; jj < nj; jj += warps) {
    const bf16* kr = kc + (size_t(j0 + jj) * Hk + kvh) * d;
    float acc = 0;
    for (int c = lane * 8; c < d; c += 256) {
      const uint4 raw = *reinterpret_cast<const uint4*>(kr + c);
      const __nv_bfloat162* p2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(p2[e]);
        acc += qs[c + 2 * e] * f.x + qs[c + 2 * e + 1] * f.y;
      }
    }
    for (int w = 16; w > 0; w >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, w);
    if (lane == 0) s[jj] = acc * scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int j = threadIdx.x; j < nj; j += blockDim.x) m = fmaxf(m, s[j]);
  m = block_max(m, red);
  float l = 0;
  for (int j = threadIdx.x; j < nj; j += blockDim.x) {
    const float p = __expf(s[j] - m);
    s[j] = p;
    l += p;
  }
  l = block_sum(l, red);  // its barriers also publish s[]
  float* out = part + (size_t(h) * nsplit + split) * (d + 2);
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0;
    for (int j = 0; j < nj; ++j) acc += s[j] * __bfloat162float(vc[(size_t(j0 + j) * Hk + kvh) * d + c]);
    out[c] = acc;
  }
  if (threadIdx.x == 0) out[d] = m, out[d + 1] = l;
}

// Combines the chunks of each head (log-sum-exp weights); grid = heads, blockDim = d.
__global__ void attn_combine_kernel(const float* part, bf16* out, int d, int nsplit) {
  const int h = blockIdx.x, c = threadIdx.x;
  const float* p = part + size_t(h) * nsplit * (d + 2);
  float M = -INFINITY;
  for (int s = 0; s < nsplit; ++s) M = fmaxf(M, p[size_t(s) * (d + 2) + d]);
  float L = 0, acc = 0;
  for (int s = 0; s < nsplit; ++s) {
    const float* ps = p + size_t(s) * (d + 2);
    const float w = __expf(ps[d] - M);
    L += w * ps[d + 1];
    acc += w * ps[c];
  }
  out[h * d + c] = __float2bfloat16(acc / L);
}

struct LayerBufs {
  bf16 *wq, *wk, *wv, *wo, *wg, *wu, *wd;         // [out, in] row-major
  bf16 *n_in, *n_post_attn, *n_pre_mlp, *n_post_mlp, *n_q, *n_k;
  bf16 *kc, *vc;
  int keys;
};

nlohmann::json decode_run(const DecodeShape& S, int reps, int warmup, bool use_gemmex) {
  Res r;
  const int h = int(S.hidden), I = int(S.intermediate), H = int(S.heads), Hk = int(S.kv_heads), d = int(S.head_dim);
  const int qd = H * d, kd = Hk * d;
  cudaStream_t s = nullptr;
  ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } sg{s};
  std::vector<LayerBufs> L(size_t(S.layers));
  uint32_t seed = 100;
  auto weights = [&](size_t n, float scale) {
    bf16* p = r.alloc<bf16>(n);
    fill<bf16>(p, n, scale, seed++, s);
    return p;
  };
  for (int64_t l = 0; l < S.layers; ++l) {
    auto& b = L[size_t(l)];
    const float si = 1.f / std::sqrt(float(h)), sq = 1.f / std::sqrt(float(qd)), sI = 1.f / std::sqrt(float(I));
    b.wq = weights(size_t(qd) * h, si), b.wk = weights(size_t(kd) * h, si), b.wv = weights(size_t(kd) * h, si);
    b.wo = weights(size_t(h) * qd, sq), b.wg = weights(size_t(I) * h, si);
    b.wu = S.gated_mlp ? weights(size_t(I) * h, si) : nullptr;
    b.wd = weights(size_t(h) * I, sI);
    b.n_in = weights(size_t(h), 0.1f), b.n_post_attn = weights(size_t(h), 0.1f), b.n_pre_mlp = weights(size_t(h), 0.1f);
    b.n_post_mlp = weights(size_t(h), 0.1f), b.n_q = weights(size_t(d), 0.1f), b.n_k = weights(size_t(d), 0.1f);
    b.keys = int(S.keys(l));
    b.kc = weights(size_t(b.keys) * kd, 1.f), b.vc = weights(size_t(b.keys) * kd, 1.f);
  }
  bf16* n_final = weights(size_t(h), 0.1f);
  float* h0 = r.alloc<float>(size_t(h));
  fill<float>(h0, size_t(h), 1.f, 7, s);
  float* hs = r.alloc<float>(size_t(h));
  float* t = r.alloc<float>(size_t(h));
  bf16* xn = r.alloc<bf16>(size_t(std::max(h, I)));
  float* q = r.alloc<float>(size_t(qd));
  float* k = r.alloc<float>(size_t(kd));
  float* v = r.alloc<float>(size_t(kd));
  bf16* qb = r.alloc<bf16>(size_t(qd));
  bf16* att = r.alloc<bf16>(size_t(qd));
  float* g = r.alloc<float>(size_t(I));
  float* u = r.alloc<float>(size_t(I));
  bf16* act = r.alloc<bf16>(size_t(I));
  bf16* out = r.alloc<bf16>(size_t(h));
  const int max_split = int((S.context + kAttnChunk - 1) / kAttnChunk);
  float* part = r.alloc<float>(size_t(H) * max_split * (d + 2));
  // cuBLAS on our stream with a fixed workspace (no allocation while a graph is being captured).
  cublasHandle_t cb = nullptr;
  ckb(cublasCreate(&cb), "cublasCreate");
  struct CublasGuard {
    cublasHandle_t h;
    ~CublasGuard() { cublasDestroy(h); }
  } cg{cb};
  const size_t ws_bytes = size_t(32) << 20;
  ckb(cublasSetStream(cb, s), "cublasSetStream");
  ckb(cublasSetWorkspace(cb, r.alloc<char>(ws_bytes), ws_bytes), "cublasSetWorkspace");
  ck(cudaStreamSynchronize(s), "sync");

  const float one = 1.f, zero = 0.f;
  // y[out] = W[out, in] x: column-major W is (in x out) with lda = in, so y = W^T x in cuBLAS terms.
  auto gemv = [&](const bf16* W, const bf16* x, float* y, int in, int outn) {
    if (use_gemmex)
      ckb(cublasGemmEx(cb, CUBLAS_OP_T, CUBLAS_OP_N, outn, 1, in, &one, W, CUDA_R_16BF, in, x, CUDA_R_16BF, in, &zero, y,
                       CUDA_R_32F, outn, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    else
      ckb(cublasTSSgemvStridedBatched(cb, CUBLAS_OP_T, in, outn, &one, W, in, 0, x, 1, 0, &zero, y, 1, 0, 1),
          "cublasTSSgemvStridedBatched");
  };
  const int pos = int(S.context) - 1;  // the new token's slot in a global layer's cache
  const float scale = 1.f / std::sqrt(float(d));
  const unsigned ew = 256;
  int launches = 0;
  auto step = [&] {
    launches = 0;
    for (int64_t l = 0; l < S.layers; ++l) {
      const auto& b = L[size_t(l)];
      rmsnorm_kernel<bf16><<<1, 256, 0, s>>>(l == 0 ? h0 : hs, b.n_in, xn, l == 0 ? hs : nullptr, h);
      gemv(b.wq, xn, q, h, qd);
      gemv(b.wk, xn, k, h, kd);
      gemv(b.wv, xn, v, h, kd);
      qk_rope_kv_kernel<<<unsigned(H + Hk), unsigned(d), size_t(d) * 4, s>>>(
          q, k, v, b.n_q, b.n_k, qb, b.kc, b.vc, H, Hk, d, std::min(pos, b.keys - 1), S.qk_norm ? 1 : 0);
      const int nsplit = (b.keys + kAttnChunk - 1) / kAttnChunk;
      attn_partial_kernel<<<dim3(unsigned(H), unsigned(nsplit)), 256, size_t(d + kAttnChunk) * 4, s>>>(
          qb, b.kc, b.vc, part, H, Hk, d, b.keys, scale);
      attn_combine_kernel<<<unsigned(H), unsigned(d), 0, s>>>(part, att, d, nsplit);
      gemv(b.wo, att, t, qd, h);
      if (S.sandwich_norm) rmsnorm_kernel<float><<<1, 256, 0, s>>>(t, b.n_post_attn, t, nullptr, h);
      add_kernel<<<unsigned((h + ew - 1) / ew), ew, 0, s>>>(hs, t, h);
      rmsnorm_kernel<bf16><<<1, 256, 0, s>>>(hs, b.n_pre_mlp, xn, nullptr, h);
      gemv(b.wg, xn, g, h, I);
      if (S.gated_mlp) gemv(b.wu, xn, u, h, I);
      gelu_mul_kernel<<<unsigned((I + ew - 1) / ew), ew, 0, s>>>(g, S.gated_mlp ? u : nullptr, act, I);
      gemv(b.wd, act, t, I, h);
      if (S.sandwich_norm) rmsnorm_kernel<float><<<1, 256, 0, s>>>(t, b.n_post_mlp, t, nullptr, h);
      add_kernel<<<unsigned((h + ew - 1) / ew), ew, 0, s>>>(hs, t, h);
      launches += 14 + (S.gated_mlp ? 1 : 0) + (S.sandwich_norm ? 2 : 0);
    }
    rmsnorm_kernel<bf16><<<1, 256, 0, s>>>(hs, n_final, out, nullptr, h);
    launches += 1;
    ck(cudaGetLastError(), "decode step launch");
  };

  cudaEvent_t e0 = r.event(), e1 = r.event();
  std::vector<double> eager_ms, eager_host_us, graph_ms, graph_host_us;
  {
    Nvtx range("decode.eager");
    for (int i = 0; i < warmup + reps; ++i) {
      ck(cudaEventRecord(e0, s), "record");
      const auto t0 = std::chrono::steady_clock::now();
      step();
      const auto t1 = std::chrono::steady_clock::now();
      ck(cudaEventRecord(e1, s), "record");
      ck(cudaEventSynchronize(e1), "sync");
      if (i < warmup) continue;
      eager_ms.push_back(elapsed_ms(e0, e1));
      eager_host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
  std::vector<bf16> out_eager(static_cast<size_t>(h)), out_graph(static_cast<size_t>(h));
  ck(cudaMemcpy(out_eager.data(), out, size_t(h) * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  struct GraphGuard {
    cudaGraph_t& g;
    cudaGraphExec_t& e;
    ~GraphGuard() {
      if (e) cudaGraphExecDestroy(e);
      if (g) cudaGraphDestroy(g);
    }
  } gg{graph, exec};
  const auto c0 = std::chrono::steady_clock::now();
  ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    step();
  } catch (...) {
    cudaGraph_t tmp = nullptr;
    cudaStreamEndCapture(s, &tmp);
    if (tmp) cudaGraphDestroy(tmp);
    throw;
  }
  ck(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  const auto c1 = std::chrono::steady_clock::now();
  ck(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  const auto c2 = std::chrono::steady_clock::now();
  size_t nodes = 0;
  ck(cudaGraphGetNodes(graph, nullptr, &nodes), "cudaGraphGetNodes");
  {
    Nvtx range("decode.graph");
    for (int i = 0; i < warmup + reps; ++i) {
      ck(cudaEventRecord(e0, s), "record");
      const auto t0 = std::chrono::steady_clock::now();
      ck(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
      const auto t1 = std::chrono::steady_clock::now();
      ck(cudaEventRecord(e1, s), "record");
      ck(cudaEventSynchronize(e1), "sync");
      if (i < warmup) continue;
      graph_ms.push_back(elapsed_ms(e0, e1));
      graph_host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
  ck(cudaMemcpy(out_graph.data(), out, size_t(h) * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
  double diff = 0;
  for (size_t i = 0; i < out_eager.size(); ++i)
    diff = std::max(diff, double(std::fabs(__bfloat162float(out_eager[i]) - __bfloat162float(out_graph[i]))));

  const double em = median(eager_ms) * 1e3, gm = median(graph_ms) * 1e3;  // us
  return {{"launches_per_step", launches}, {"graph_nodes", nodes}, {"gemv", use_gemmex ? "cublasGemmEx (N = 1)" : "cublasTSSgemvStridedBatched (batch 1)"}, {"reps", reps}, {"warmup", warmup},
          {"eager", {{"median_us", em}, {"min_us", min_of(eager_ms) * 1e3}, {"host_enqueue_median_us", median(eager_host_us)}}},
          {"graph", {{"median_us", gm}, {"min_us", min_of(graph_ms) * 1e3}, {"host_launch_median_us", median(graph_host_us)},
                     {"capture_ms", std::chrono::duration<double, std::milli>(c1 - c0).count()},
                     {"instantiate_ms", std::chrono::duration<double, std::milli>(c2 - c1).count()}}},
          {"gap_us", em - gm}, {"gap_us_per_launch", (em - gm) / launches}, {"speedup", em / gm},
          {"max_abs_diff_eager_vs_graph", diff},
          {"timing", "CUDA events around one whole step on a non-blocking stream; median of reps after warm-up"}};
}

}  // namespace

GpuDemoResult gpu_gelu_demo(int64_t n, const std::string& dtype, int reps, int warmup) {
  GpuDemoResult out;
  if (n <= 0 || reps <= 0 || warmup < 0) {
    out.error = "n and reps must be positive, warmup not negative";
    return out;
  }
  if (dtype != "bf16" && dtype != "f32") {
    out.error = "dtype must be bf16 or f32, got '" + dtype + "'";
    return out;
  }
  const std::string name = device_name();
  if (name.empty()) {
    out.error = "no CUDA device";
    return out;
  }
  try {
    cudaDeviceProp prop{};
    ck(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    out.result = dtype == "bf16" ? gelu_run<__nv_bfloat16>(n, reps, warmup, prop) : gelu_run<float>(n, reps, warmup, prop);
    out.result["gpu"] = name;
    out.available = true;
  } catch (const Fail& f) {
    out.error = f.what;
  }
  return out;
}

GpuDemoResult gpu_decode_demo(const DecodeShape& s, int reps, int warmup, const std::string& gemv) {
  GpuDemoResult out;
  try {
    validate_decode_shape(s);
  } catch (const Error& e) {
    out.error = e.what();
    return out;
  }
  if (reps <= 0 || warmup < 0) {
    out.error = "reps must be positive, warmup not negative";
    return out;
  }
  if (gemv != "gemv" && gemv != "gemmex") {
    out.error = "gemv must be gemv or gemmex, got '" + gemv + "'";
    return out;
  }
  const std::string name = device_name();
  if (name.empty()) {
    out.error = "no CUDA device";
    return out;
  }
  try {
    out.result = decode_run(s, reps, warmup, gemv == "gemmex");
    out.result["gpu"] = name;
    out.available = true;
  } catch (const Fail& f) {
    out.error = f.what;
  }
  return out;
}

}  // namespace flashkit::analysis
