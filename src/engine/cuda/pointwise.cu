// The engine's small ops: embedding gather, RMSNorm (per row or per head), residual add + norm, add, softcap, gated
// activation, RoPE, KV-cache append and ring gather, dtype conversion. Each is one launch, f32 math; activations
// f32 or bf16 (template flag). Positions and token ids are read from the device step buffer.
#include "engine/cuda/common.cuh"

#include <algorithm>

namespace flashkit::engine::cuda {

namespace {

int threads_for(int64_t n) { return int(std::clamp<int64_t>((n + 31) / 32 * 32, 32, 256)); }
unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(std::clamp<int64_t>(b, 1, int64_t(sm_count()) * 16));
}

template <bool BF16>
__global__ void embed_kernel(const void* table, bool table_bf16, int64_t ldtab, int64_t vocab, const int32_t* tokens,
                             void* out, int64_t ldo, int64_t cols, float scale) {
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.y;
  const int32_t id = tokens[t];
  const bool ok = id >= 0 && id < vocab;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const float v = ok ? ld_any(table, table_bf16, int64_t(id) * ldtab + c) * scale : __int_as_float(0x7fc00000);
    st_act<BF16>(out, t * ldo + c, v);
  }
}

// One block per (row, group). XBF / OBF: input / output dtypes (out aliases x only when they are equal).
template <bool XBF, bool OBF>
__global__ void rms_norm_kernel(const void* x, int64_t ldx, const float* w, void* out, int64_t ldo, int64_t group,
                                float eps) {
  __shared__ float red[32];
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.y, g0 = int64_t(blockIdx.x) * group;
  float ss = 0;
  for (int64_t c = threadIdx.x; c < group; c += blockDim.x) {
    const float v = ld_act<XBF>(x, t * ldx + g0 + c);
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / float(group) + eps);
  for (int64_t c = threadIdx.x; c < group; c += blockDim.x)
    st_act<OBF>(out, t * ldo + g0 + c, ld_act<XBF>(x, t * ldx + g0 + c) * r * w[c]);
}

template <bool BF16>
__global__ void add_rms_norm_kernel(const void* x, int64_t ldx, const float* w, void* res, int64_t ldr, int64_t cols,
                                    float eps) {
  __shared__ float red[32];
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.x;
  float ss = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = ld_act<BF16>(x, t * ldx + c);
    ss += v * v;
  }
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / float(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    st_act<BF16>(res, t * ldr + c, ld_act<BF16>(res, t * ldr + c) + ld_act<BF16>(x, t * ldx + c) * r * w[c]);
}

// Elementwise over [T, cols]: op 0 = y += x, 1 = softcap in place, 2 = gated activation.
template <bool BF16, int OP>
__global__ void ew_kernel(const void* x, int64_t ldx, void* y, int64_t ldy, int64_t T, int64_t cols, float cap,
                          Act act) {
  pdl_trigger();
  pdl_wait();
  const int64_t n = T * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols, c = i - t * cols;
    if constexpr (OP == 0) {
      st_act<BF16>(y, t * ldy + c, ld_act<BF16>(y, t * ldy + c) + ld_act<BF16>(x, t * ldx + c));
    } else if constexpr (OP == 1) {
      const float v = ld_act<BF16>(y, t * ldy + c);
      st_act<BF16>(y, t * ldy + c, cap * tanhf(v / cap));
    } else {
      const float g = ld_act<BF16>(x, t * ldx + c), u = ld_act<BF16>(x, t * ldx + cols + c);
      st_act<BF16>(y, t * ldy + c, act_fn(act, g) * u);
    }
  }
}

// One block per (row, head); thread i rotates the pair (i, i + d/2).
template <bool BF16>
__global__ void rope_kernel(void* x, int64_t ldx, int64_t head_dim, const float* inv_freq, float scaling,
                            const int32_t* pos0, const int32_t* positions) {
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.x, h = blockIdx.y, half = head_dim / 2;
  const float pos = float(positions ? positions[t] : *pos0 + int32_t(t));
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    c *= scaling, s *= scaling;
    const int64_t b = t * ldx + h * head_dim;
    const float x1 = ld_act<BF16>(x, b + i), x2 = ld_act<BF16>(x, b + i + half);
    st_act<BF16>(x, b + i, x1 * c - x2 * s);
    st_act<BF16>(x, b + i + half, x2 * c + x1 * s);
  }
}

__device__ __forceinline__ void st_cache(void* c, bool bf16, int64_t i, float v) {
  if (bf16) static_cast<uint16_t*>(c)[i] = f2bf(v);
  else static_cast<float*>(c)[i] = v;
}

__global__ void kv_append_kernel(const void* k, int64_t ldk, const void* v, int64_t ldv, bool src_bf16, void* kc,
                                 void* vc, bool cache_bf16, int64_t kvd, int64_t capacity, bool ring, int64_t T,
                                 const int32_t* pos0) {
  pdl_trigger();
  pdl_wait();
  const int64_t t = blockIdx.y;
  if (ring && T > capacity && t < T - capacity) return;  // overwritten later in this same chunk
  const int64_t p = int64_t(*pos0) + t;
  const int64_t row = ring ? p % capacity : p;
  if (row < 0 || row >= capacity) return;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < kvd; c += int64_t(gridDim.x) * blockDim.x) {
    st_cache(kc, cache_bf16, row * kvd + c, ld_any(k, src_bf16, t * ldk + c));
    st_cache(vc, cache_bf16, row * kvd + c, ld_any(v, src_bf16, t * ldv + c));
  }
}

__global__ void kv_gather_kernel(const void* kc, const void* vc, bool cache_bf16, int64_t capacity, bool ring,
                                 int64_t kvd, int64_t pos0, int64_t n_old, const void* k, int64_t ldk, const void* v,
                                 int64_t ldv, bool src_bf16, uint16_t* ko, uint16_t* vo) {
  pdl_trigger();
  pdl_wait();
  const int64_t r = blockIdx.y;  // output row r holds position pos0 - n_old + r
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < kvd; c += int64_t(gridDim.x) * blockDim.x) {
    if (r < n_old) {
      const int64_t p = pos0 - n_old + r, slot = ring ? p % capacity : p;
      ko[r * kvd + c] = f2bf(ld_any(kc, cache_bf16, slot * kvd + c));
      vo[r * kvd + c] = f2bf(ld_any(vc, cache_bf16, slot * kvd + c));
    } else {
      const int64_t t = r - n_old;
      ko[r * kvd + c] = f2bf(ld_any(k, src_bf16, t * ldk + c));
      vo[r * kvd + c] = f2bf(ld_any(v, src_bf16, t * ldv + c));
    }
  }
}

template <bool BF16>
__global__ void bias_kernel(void* y, int64_t ldy, const float* bias, int64_t T, int64_t N) {
  pdl_trigger();
  pdl_wait();
  const int64_t n = T * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / N, c = i - t * N;
    st_act<BF16>(y, t * ldy + c, ld_act<BF16>(y, t * ldy + c) + bias[c]);
  }
}

__global__ void convert_kernel(const void* src, bool src_bf16, int64_t lds, void* dst, bool dst_bf16, int64_t ldd,
                               int64_t cols) {
  pdl_trigger();
  pdl_wait();
  const int64_t r = blockIdx.y;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const float v = ld_any(src, src_bf16, r * lds + c);
    if (dst_bf16) static_cast<uint16_t*>(dst)[r * ldd + c] = f2bf(v);
    else static_cast<float*>(dst)[r * ldd + c] = v;
  }
}

unsigned col_blocks(int64_t cols, int threads) { return unsigned(std::clamp<int64_t>((cols + threads - 1) / threads, 1, 64)); }

void check_rows(int64_t T) {
  if (T > 65535) fail(Status::invalid_argument, "engine cuda kernels: more than 65535 rows in one launch");
}

}  // namespace

void embed(const void* table, bool table_bf16, int64_t ldtab, int64_t vocab, const int32_t* tokens, void* out,
           bool out_bf16, int64_t ldo, int64_t T, int64_t cols, float scale, cudaStream_t stream) {
  if (T <= 0 || cols <= 0) return;
  check_rows(T);
  const int th = threads_for(cols);
  const dim3 grid(col_blocks(cols, th), unsigned(T));
  if (out_bf16) launch("embed", embed_kernel<true>, grid, dim3(th), 0, stream, table, table_bf16, ldtab, vocab, tokens, out, ldo, cols, scale);
  else launch("embed", embed_kernel<false>, grid, dim3(th), 0, stream, table, table_bf16, ldtab, vocab, tokens, out, ldo, cols, scale);
}

void rms_norm(const void* x, int64_t ldx, const float* w, void* out, int64_t ldo, bool bf16, int64_t T, int64_t cols,
              int64_t group, float eps, cudaStream_t stream) {
  rms_norm(x, ldx, bf16, w, out, ldo, bf16, T, cols, group, eps, stream);
}

void rms_norm(const void* x, int64_t ldx, bool x_bf16, const float* w, void* out, int64_t ldo, bool out_bf16,
              int64_t T, int64_t cols, int64_t group, float eps, cudaStream_t stream) {
  if (T <= 0 || cols <= 0) return;
  if (group <= 0 || cols % group) fail(Status::invalid_argument, "rms_norm: cols must be a multiple of group");
  check_rows(T);
  const int th = threads_for(std::min<int64_t>(group, 1024));
  const dim3 grid(unsigned(cols / group), unsigned(T));
  auto kern = x_bf16 ? (out_bf16 ? rms_norm_kernel<true, true> : rms_norm_kernel<true, false>)
                     : (out_bf16 ? rms_norm_kernel<false, true> : rms_norm_kernel<false, false>);
  launch("rms_norm", kern, grid, dim3(th), 0, stream, x, ldx, w, out, ldo, group, eps);
}

void add_rms_norm(const void* x, int64_t ldx, const float* w, void* residual, int64_t ldr, bool bf16, int64_t T,
                  int64_t cols, float eps, cudaStream_t stream) {
  if (T <= 0 || cols <= 0) return;
  const int th = threads_for(std::min<int64_t>(cols, 1024));
  if (bf16) launch("add_rms_norm", add_rms_norm_kernel<true>, dim3(unsigned(T)), dim3(th), 0, stream, x, ldx, w, residual, ldr, cols, eps);
  else launch("add_rms_norm", add_rms_norm_kernel<false>, dim3(unsigned(T)), dim3(th), 0, stream, x, ldx, w, residual, ldr, cols, eps);
}

void add(const void* x, int64_t ldx, void* y, int64_t ldy, bool bf16, int64_t T, int64_t cols, cudaStream_t stream) {
  if (T <= 0 || cols <= 0) return;
  const unsigned b = blocks_for(T * cols, 256);
  if (bf16) launch("add", ew_kernel<true, 0>, dim3(b), dim3(256), 0, stream, x, ldx, y, ldy, T, cols, 0.0f, Act::none);
  else launch("add", ew_kernel<false, 0>, dim3(b), dim3(256), 0, stream, x, ldx, y, ldy, T, cols, 0.0f, Act::none);
}

void softcap(void* x, int64_t ldx, bool bf16, int64_t T, int64_t cols, float cap, cudaStream_t stream) {
  if (T <= 0 || cols <= 0) return;
  const unsigned b = blocks_for(T * cols, 256);
  const void* cx = x;
  if (bf16) launch("softcap", ew_kernel<true, 1>, dim3(b), dim3(256), 0, stream, cx, ldx, x, ldx, T, cols, cap, Act::none);
  else launch("softcap", ew_kernel<false, 1>, dim3(b), dim3(256), 0, stream, cx, ldx, x, ldx, T, cols, cap, Act::none);
}

void gated_act(const void* gu, int64_t ldgu, void* out, int64_t ldo, bool bf16, int64_t T, int64_t F, Act act,
               cudaStream_t stream) {
  if (T <= 0 || F <= 0) return;
  const unsigned b = blocks_for(T * F, 256);
  if (bf16) launch("gated_act", ew_kernel<true, 2>, dim3(b), dim3(256), 0, stream, gu, ldgu, out, ldo, T, F, 0.0f, act);
  else launch("gated_act", ew_kernel<false, 2>, dim3(b), dim3(256), 0, stream, gu, ldgu, out, ldo, T, F, 0.0f, act);
}

void rope(void* x, int64_t ldx, bool bf16, int64_t T, int64_t heads, int64_t head_dim, const float* inv_freq,
          float attn_scaling, const int32_t* pos0, cudaStream_t stream) {
  if (T <= 0 || heads <= 0) return;
  if (head_dim % 2) fail(Status::invalid_argument, "rope: head_dim must be even");
  check_rows(std::max(T, heads));
  const int th = threads_for(std::min<int64_t>(head_dim / 2, 256));
  const dim3 grid{unsigned(T), unsigned(heads)};
  const int32_t* none = nullptr;
  if (bf16) launch("rope", rope_kernel<true>, grid, dim3(th), 0, stream, x, ldx, head_dim, inv_freq, attn_scaling, pos0, none);
  else launch("rope", rope_kernel<false>, grid, dim3(th), 0, stream, x, ldx, head_dim, inv_freq, attn_scaling, pos0, none);
}

void rope_positions(void* x, int64_t ldx, bool bf16, int64_t T, int64_t heads, int64_t head_dim,
                    const float* inv_freq, float attn_scaling, const int32_t* positions, cudaStream_t stream) {
  if (T <= 0 || heads <= 0) return;
  if (head_dim % 2) fail(Status::invalid_argument, "rope: head_dim must be even");
  check_rows(std::max(T, heads));
  const int th = threads_for(std::min<int64_t>(head_dim / 2, 256));
  const dim3 grid{unsigned(T), unsigned(heads)};
  const int32_t* none = nullptr;
  if (bf16) launch("rope", rope_kernel<true>, grid, dim3(th), 0, stream, x, ldx, head_dim, inv_freq, attn_scaling, none, positions);
  else launch("rope", rope_kernel<false>, grid, dim3(th), 0, stream, x, ldx, head_dim, inv_freq, attn_scaling, none, positions);
}

void kv_append(const void* k, int64_t ldk, const void* v, int64_t ldv, bool src_bf16, void* kc, void* vc,
               bool cache_bf16, int64_t kvd, int64_t capacity, bool ring, int64_t T, const int32_t* pos0,
               cudaStream_t stream) {
  if (T <= 0 || kvd <= 0) return;
  check_rows(T);
  const int th = threads_for(kvd);
  launch("kv_append", kv_append_kernel, dim3(col_blocks(kvd, th), unsigned(T)), dim3(th), 0, stream, k, ldk, v, ldv,
         src_bf16, kc, vc, cache_bf16, kvd, capacity, ring, T, pos0);
}

void kv_gather(const void* kc, const void* vc, bool cache_bf16, int64_t capacity, bool ring, int64_t kvd,
               int64_t pos0_host, int64_t n_old, const void* k, int64_t ldk, const void* v, int64_t ldv, bool src_bf16,
               int64_t T, uint16_t* ko, uint16_t* vo, cudaStream_t stream) {
  const int64_t rows = n_old + T;
  if (rows <= 0 || kvd <= 0) return;
  check_rows(rows);
  const int th = threads_for(kvd);
  launch("kv_gather", kv_gather_kernel, dim3(col_blocks(kvd, th), unsigned(rows)), dim3(th), 0, stream, kc, vc,
         cache_bf16, capacity, ring, kvd, pos0_host, n_old, k, ldk, v, ldv, src_bf16, ko, vo);
}

void add_bias(void* y, int64_t ldy, bool bf16, const float* bias, int64_t T, int64_t N, cudaStream_t stream) {
  if (T <= 0 || N <= 0) return;
  const unsigned b = blocks_for(T * N, 256);
  if (bf16) launch("add_bias", bias_kernel<true>, dim3(b), dim3(256), 0, stream, y, ldy, bias, T, N);
  else launch("add_bias", bias_kernel<false>, dim3(b), dim3(256), 0, stream, y, ldy, bias, T, N);
}

void convert_rows(const void* src, bool src_bf16, int64_t lds, void* dst, bool dst_bf16, int64_t ldd, int64_t rows,
                  int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  check_rows(rows);
  const int th = threads_for(cols);
  launch("convert_rows", convert_kernel, dim3(col_blocks(cols, th), unsigned(rows)), dim3(th), 0, stream, src, src_bf16,
         lds, dst, dst_bf16, ldd, cols);
}

}  // namespace flashkit::engine::cuda
