// RMSNorm forward and backward, one warp per normalized group (a row, or one head of a row), so the row
// reduction is a warp shuffle with no block barrier. Lanes take 8 columns at a time (16-byte loads) when C, the
// strides and the pointers are multiples of 8 elements / 16 bytes; otherwise one column at a time.
//
// Backward weight gradient, deterministic: block b of a fixed grid (its size depends only on the sizes) has W
// warps; warp w handles groups b * W + w, + B * W, ... and accumulates dy * xhat for its lanes' columns in its own
// shared-memory row; at the end the block adds its W rows in warp order into scratch[b, :], and a second kernel adds
// scratch[0..B) in block order into dw. Floors: forward 4 bytes per element (read x, write y), backward 6
// (read dy, x; write dx; 8 when dx accumulates) plus 8 * B / groups-per-block bytes per column for the partials.
#include <type_traits>

#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

constexpr int kFwdWarps = 8;
constexpr int kMaxBwdBlocks = 512;
constexpr int64_t kSmemBudget = 48 * 1024;  // per block, without the opt-in attribute

// Pointer to group r = (t, g) of a [T, groups * C] view with row stride ld.
template <typename P>
__device__ __forceinline__ P* group_ptr(P* base, int64_t r, int64_t groups, int64_t C, int64_t ld) {
  const int64_t t = r / groups;
  return base + t * ld + (r - t * groups) * C;
}

template <bool VEC, typename WT>
__global__ void rmsnorm_fwd_kernel(const uint16_t* x, int64_t ldx, const WT* w, uint16_t* y, int64_t ldy, float* rstd,
                                   int64_t rows, int64_t groups, int64_t C, float eps, float w_off) {
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;  // the whole warp
  const uint16_t* xr = group_ptr(x, r, groups, C, ldx);
  uint16_t* yr = group_ptr(y, r, groups, C, ldy);
  float ss = 0.0f;
  if constexpr (VEC) {
    for (int64_t c = lane * 8; c < C; c += 256) {
      float f[8];
      ld8(xr, c, f);
#pragma unroll
      for (int k = 0; k < 8; ++k) ss += f[k] * f[k];
    }
  } else {
    for (int64_t c = lane; c < C; c += 32) {
      const float v = ld1(xr, c);
      ss += v * v;
    }
  }
  const float rs = rsqrtf(warp_sum(ss) / float(C) + eps);
  if (rstd && lane == 0) rstd[r] = rs;
  // Each lane rewrites exactly the columns it read, so y may alias x.
  if constexpr (VEC) {
    for (int64_t c = lane * 8; c < C; c += 256) {
      float f[8], wv[8];
      ld8(xr, c, f);
      ld8(w, c, wv);
#pragma unroll
      for (int k = 0; k < 8; ++k) f[k] = f[k] * rs * (w_off + wv[k]);
      st8(yr, c, f);
    }
  } else {
    for (int64_t c = lane; c < C; c += 32) st1(yr, c, ld1(xr, c) * rs * (w_off + ld1(w, c)));
  }
}

template <bool VEC, typename WT>
__global__ void rmsnorm_bwd_kernel(const uint16_t* dy, int64_t lddy, const uint16_t* x, int64_t ldx, const WT* w,
                                   const float* rstd, uint16_t* dx, int64_t lddx, bool accumulate, float* scratch,
                                   int64_t rows, int64_t groups, int64_t C, float w_off) {
  extern __shared__ float acc[];  // [warps][C]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float* my = acc + int64_t(warp) * C;
  for (int64_t c = lane; c < C; c += 32) my[c] = 0.0f;
  __syncwarp();
  for (int64_t r = int64_t(blockIdx.x) * warps + warp; r < rows; r += int64_t(gridDim.x) * warps) {
    const uint16_t* dyr = group_ptr(dy, r, groups, C, lddy);
    const uint16_t* xr = group_ptr(x, r, groups, C, ldx);
    uint16_t* dxr = group_ptr(dx, r, groups, C, lddx);
    const float rs = rstd[r];
    // mean(g * xhat), g = dy * (w_off + w)
    float dot = 0.0f;
    if constexpr (VEC) {
      for (int64_t c = lane * 8; c < C; c += 256) {
        float d[8], xv[8], wv[8];
        ld8(dyr, c, d);
        ld8(xr, c, xv);
        ld8(w, c, wv);
#pragma unroll
        for (int k = 0; k < 8; ++k) dot += d[k] * (w_off + wv[k]) * xv[k];
      }
    } else {
      for (int64_t c = lane; c < C; c += 32) dot += ld1(dyr, c) * (w_off + ld1(w, c)) * ld1(xr, c);
    }
    const float mean = warp_sum(dot) * rs / float(C);
    // Each lane reads dy at its columns before writing dx there, so dx may alias dy.
    if constexpr (VEC) {
      for (int64_t c = lane * 8; c < C; c += 256) {
        float d[8], xv[8], wv[8], o[8];
        ld8(dyr, c, d);
        ld8(xr, c, xv);
        ld8(w, c, wv);
        if (accumulate) ld8(dxr, c, o);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const float xh = xv[k] * rs;
          const float v = rs * (d[k] * (w_off + wv[k]) - xh * mean);
          o[k] = accumulate ? o[k] + v : v;
          my[c + k] += d[k] * xh;
        }
        st8(dxr, c, o);
      }
    } else {
      for (int64_t c = lane; c < C; c += 32) {
        const float d = ld1(dyr, c), xh = ld1(xr, c) * rs;
        const float v = rs * (d * (w_off + ld1(w, c)) - xh * mean);
        st1(dxr, c, accumulate ? ld1(dxr, c) + v : v);
        my[c] += d * xh;
      }
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float s = acc[c];
    for (int k = 1; k < warps; ++k) s += acc[int64_t(k) * C + c];
    scratch[int64_t(blockIdx.x) * C + c] = s;
  }
}

// dw[c] += sum over b < blocks of scratch[b, c], in b order.
__global__ void rmsnorm_dw_kernel(const float* scratch, int blocks, int64_t C, float* dw) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int b = 0; b < blocks; ++b) s += scratch[int64_t(b) * C + c];
  dw[c] += s;
}

struct BwdGrid {
  int warps, blocks;
};
BwdGrid bwd_grid(int64_t rows, int64_t C) {
  const int warps = int(std::clamp<int64_t>(kSmemBudget / (C * 4), 1, 8));
  const int blocks = int(std::clamp<int64_t>((rows + warps - 1) / warps, 1, kMaxBwdBlocks));
  return {warps, blocks};
}

void check_layout(const char* fn, int64_t T, int64_t groups, int64_t C, int64_t ld, const char* ld_name) {
  need(ld >= groups * C, fn, std::string(ld_name) + " must be >= groups * C = " + std::to_string(groups * C) +
                                 ", got " + std::to_string(ld));
  need(T <= std::numeric_limits<int64_t>::max() / std::max<int64_t>(ld, 1), fn, "T * " + std::string(ld_name) + " overflows");
}
void check_sizes(const char* fn, int64_t T, int64_t groups, int64_t C) {
  need_size(T, fn, "T");
  need(groups >= 1 && groups <= 65536, fn, "groups must be in [1, 65536], got " + std::to_string(groups));
  need(C >= 1 && C <= 65536, fn, "C must be in [1, 65536], got " + std::to_string(C));
  need(T * groups <= std::numeric_limits<int32_t>::max(), fn, "T * groups must be < 2^31");
}

template <typename WT>
void fwd(const bf16* x, int64_t ldx, const WT* w, bf16* y, int64_t ldy, float* rstd, int64_t T, int64_t groups,
         int64_t C, float eps, bool plus_one, cudaStream_t stream) {
  const char* fn = "rmsnorm_fwd";
  check_sizes(fn, T, groups, C);
  need(eps >= 0.0f, fn, "eps must be >= 0");
  if (T == 0) return;
  need_ptr(x, fn, "x");
  need_ptr(w, fn, "w");
  need_ptr(y, fn, "y");
  check_layout(fn, T, groups, C, ldx, "ldx");
  check_layout(fn, T, groups, C, ldy, "ldy");
  const int64_t rows = T * groups;
  const bool vec = C % 8 == 0 && ldx % 8 == 0 && ldy % 8 == 0 && aligned16(x) && aligned16(y) && aligned16(w);
  const unsigned grid = unsigned((rows + kFwdWarps - 1) / kFwdWarps);
  using WB = std::conditional_t<std::is_same_v<WT, float>, float, uint16_t>;
  const WB* wb = reinterpret_cast<const WB*>(w);
  const float off = plus_one ? 1.0f : 0.0f;
  if (vec) rmsnorm_fwd_kernel<true><<<grid, kFwdWarps * 32, 0, stream>>>(bits(x), ldx, wb, bits(y), ldy, rstd, rows, groups, C, eps, off);
  else rmsnorm_fwd_kernel<false><<<grid, kFwdWarps * 32, 0, stream>>>(bits(x), ldx, wb, bits(y), ldy, rstd, rows, groups, C, eps, off);
  check_launch(fn);
}

}  // namespace

void rmsnorm_fwd(const bf16* x, int64_t ldx, const float* w, bf16* y, int64_t ldy, float* rstd, int64_t T,
                 int64_t groups, int64_t C, float eps, bool plus_one, cudaStream_t stream) {
  fwd(x, ldx, w, y, ldy, rstd, T, groups, C, eps, plus_one, stream);
}
void rmsnorm_fwd(const bf16* x, int64_t ldx, const bf16* w, bf16* y, int64_t ldy, float* rstd, int64_t T,
                 int64_t groups, int64_t C, float eps, bool plus_one, cudaStream_t stream) {
  fwd(x, ldx, w, y, ldy, rstd, T, groups, C, eps, plus_one, stream);
}

int64_t rmsnorm_bwd_scratch_floats(int64_t T, int64_t groups, int64_t C) {
  check_sizes("rmsnorm_bwd_scratch_floats", T, groups, C);
  return int64_t(bwd_grid(T * groups, C).blocks) * C;
}

void rmsnorm_bwd(const bf16* dy, int64_t lddy, const bf16* x, int64_t ldx, const float* w, const float* rstd,
                 bf16* dx, int64_t lddx, bool dx_accumulate, float* dw, float* scratch, int64_t T, int64_t groups,
                 int64_t C, bool plus_one, cudaStream_t stream) {
  const char* fn = "rmsnorm_bwd";
  check_sizes(fn, T, groups, C);
  if (T == 0) return;
  need_ptr(dy, fn, "dy");
  need_ptr(x, fn, "x");
  need_ptr(w, fn, "w");
  need_ptr(rstd, fn, "rstd");
  need_ptr(dx, fn, "dx");
  need_ptr(dw, fn, "dw");
  need_ptr(scratch, fn, "scratch");
  check_layout(fn, T, groups, C, lddy, "lddy");
  check_layout(fn, T, groups, C, ldx, "ldx");
  check_layout(fn, T, groups, C, lddx, "lddx");
  const int64_t rows = T * groups;
  const BwdGrid g = bwd_grid(rows, C);
  const size_t smem = size_t(g.warps) * size_t(C) * sizeof(float);
  const bool vec = C % 8 == 0 && lddy % 8 == 0 && ldx % 8 == 0 && lddx % 8 == 0 && aligned16(dy) && aligned16(x) &&
                   aligned16(dx) && aligned16(w);
  const float off = plus_one ? 1.0f : 0.0f;
  auto kern = vec ? rmsnorm_bwd_kernel<true, float> : rmsnorm_bwd_kernel<false, float>;
  if (smem > size_t(kSmemBudget))  // C > 12288: one warp per block, more than the default 48 KiB
    check_cuda(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "rmsnorm_bwd: cudaFuncSetAttribute (C too large for shared memory?)");
  kern<<<g.blocks, g.warps * 32, smem, stream>>>(bits(dy), lddy, bits(x), ldx, w, rstd, bits(dx), lddx, dx_accumulate,
                                                 scratch, rows, groups, C, off);
  check_launch(fn);
  rmsnorm_dw_kernel<<<unsigned((C + 255) / 256), 256, 0, stream>>>(scratch, g.blocks, C, dw);
  check_launch(fn);
}

}  // namespace flashkit::train::cuda
