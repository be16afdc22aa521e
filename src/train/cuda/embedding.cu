// Token embedding: forward gather and a deterministic backward scatter-add.
//
// Backward design (no float atomics): the (id, position) pairs are sorted by id with CUB's stable radix sort
// (over only the bits that id range needs), which turns the ids into an id -> positions list where equal ids form
// one run, positions ascending. One block per run start (blocks at other sorted indices exit at once) sums its
// run's dout rows in a fixed order: the block's 8 row lanes take every 8th row of the run, then lane 0 adds the 8
// lane sums in lane order and does dtable[id] += scale * sum. Each table row is written by exactly one block, so
// the result is the same on every run. Out-of-range ids sort as the sentinel V and are skipped. Cost: the sort
// (a few us at T = 8192) plus one read of dout and one read-modify-write of each touched table row; a run is
// summed by one block, so a single very frequent id serializes on it (T / 8 steps per lane).
#include <cub/device/device_radix_sort.cuh>

#include <bit>

#include "train/cuda/common.cuh"

namespace flashkit::train::cuda {

namespace {

constexpr int kThreads = 256;

template <bool VEC>
__global__ void embedding_fwd_kernel(const int32_t* ids, const uint16_t* table, uint16_t* out, int64_t T, int64_t V,
                                     int64_t C, float scale) {
  const int64_t per_row = VEC ? C / 8 : C, n = T * per_row;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const int64_t t = i / per_row, c = (i - t * per_row) * (VEC ? 8 : 1);
    const int32_t id = ids[t];
    const bool ok = id >= 0 && id < V;
    if constexpr (VEC) {
      float f[8];
      if (ok) {
        ld8(table, int64_t(id) * C + c, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] *= scale;
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = __int_as_float(0x7fc00000);
      }
      st8(out, t * C + c, f);
    } else {
      st1(out, t * C + c, ok ? ld1(table, int64_t(id) * C + c) * scale : __int_as_float(0x7fc00000));
    }
  }
}

// keys[t] = ids[t], or V when the id is out of range; vals[t] = t.
__global__ void embedding_keys_kernel(const int32_t* ids, uint32_t* keys, int32_t* vals, int64_t T, int64_t V) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= T) return;
  const int32_t id = ids[t];
  keys[t] = (id >= 0 && id < V) ? uint32_t(id) : uint32_t(V);
  vals[t] = int32_t(t);
}

constexpr int kColLanes = 32, kRowLanes = 8;  // block = 32 column lanes x 8 row lanes

// Block (i, y): sorted index i, columns [y * 32 * W, (y + 1) * 32 * W) with W = 8 (VEC) or 1.
template <bool VEC>
__global__ void embedding_bwd_kernel(const uint32_t* keys, const int32_t* pos, const uint16_t* dout, float* dtable,
                                     int64_t T, int64_t V, int64_t C, float scale) {
  constexpr int W = VEC ? 8 : 1;
  __shared__ float part[kRowLanes][kColLanes * W];
  const int64_t i = blockIdx.x;
  const uint32_t key = keys[i];
  if (key >= V || (i > 0 && keys[i - 1] == key)) return;  // not the start of a run of a valid id
  const int cl = threadIdx.x, rl = threadIdx.y;
  const int64_t c = (int64_t(blockIdx.y) * kColLanes + cl) * W;
  float acc[W];
#pragma unroll
  for (int k = 0; k < W; ++k) acc[k] = 0.0f;
  if (c < C) {
    for (int64_t j = i + rl; j < T && keys[j] == key; j += kRowLanes) {
      const int64_t row = pos[j];
      if constexpr (VEC) {
        float f[8];
        ld8(dout, row * C + c, f);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] += f[k];
      } else {
        acc[0] += ld1(dout, row * C + c);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < W; ++k) part[rl][cl * W + k] = acc[k];
  __syncthreads();
  if (rl != 0 || c >= C) return;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    float s = part[0][cl * W + k];
#pragma unroll
    for (int r = 1; r < kRowLanes; ++r) s += part[r][cl * W + k];
    acc[k] = s * scale;
  }
  float* dst = dtable + int64_t(key) * C + c;
  if constexpr (VEC) {
    float f[8];
    ld8(dst, 0, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] += acc[k];
    st8(dst, 0, f);
  } else {
    dst[0] += acc[0];
  }
}

int key_bits(int64_t V) { return std::max(1, int(std::bit_width(uint64_t(V)))); }  // keys lie in [0, V]

size_t round256(size_t b) { return (b + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t T, int64_t V) {
  size_t bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), int(T), 0, key_bits(V)),
             "embedding_bwd: cub::DeviceRadixSort::SortPairs (workspace size)");
  return bytes;
}

void check_sizes(const char* fn, int64_t T, int64_t V, int64_t C) {
  need_size(T, fn, "T");
  need_size(V, fn, "V", std::numeric_limits<int32_t>::max() - 1);
  need_size(C, fn, "C");
}

}  // namespace

void embedding_fwd(const int32_t* ids, const bf16* table, bf16* out, int64_t T, int64_t V, int64_t C, float scale,
                   cudaStream_t stream) {
  const char* fn = "embedding_fwd";
  check_sizes(fn, T, V, C);
  if (T == 0 || C == 0) return;
  need_ptr(ids, fn, "ids");
  need_ptr(out, fn, "out");
  if (V > 0) need_ptr(table, fn, "table");
  const bool vec = C % 8 == 0 && aligned16(table) && aligned16(out);
  const int64_t work = T * (vec ? C / 8 : C);
  if (vec) embedding_fwd_kernel<true><<<grid_for(work, kThreads, 1 << 16), kThreads, 0, stream>>>(ids, bits(table), bits(out), T, V, C, scale);
  else embedding_fwd_kernel<false><<<grid_for(work, kThreads, 1 << 16), kThreads, 0, stream>>>(ids, bits(table), bits(out), T, V, C, scale);
  check_launch(fn);
}

size_t embedding_bwd_workspace_bytes(int64_t T, int64_t V) {
  check_sizes("embedding_bwd_workspace_bytes", T, V, 0);
  if (T == 0) return 0;
  return 4 * round256(size_t(T) * sizeof(int32_t)) + round256(sort_temp_bytes(T, V));
}

void embedding_bwd(const int32_t* ids, const bf16* dout, float* dtable, int64_t T, int64_t V, int64_t C, float scale,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const char* fn = "embedding_bwd";
  check_sizes(fn, T, V, C);
  if (T == 0 || C == 0 || V == 0) return;
  need_ptr(ids, fn, "ids");
  need_ptr(dout, fn, "dout");
  need_ptr(dtable, fn, "dtable");
  need_ptr(workspace, fn, "workspace");
  need((reinterpret_cast<uintptr_t>(workspace) & 255u) == 0, fn, "workspace must be 256-byte aligned (cudaMalloc)");
  const size_t need_bytes = embedding_bwd_workspace_bytes(T, V);
  need(workspace_bytes >= need_bytes, fn,
       "workspace_bytes must be >= embedding_bwd_workspace_bytes(T, V) = " + std::to_string(need_bytes) + ", got " +
           std::to_string(workspace_bytes));
  // Workspace: keys_in, vals_in, keys_out, vals_out (T 32-bit words each, 256-byte aligned), then CUB's temporary storage.
  char* ws = static_cast<char*>(workspace);
  const size_t arr = round256(size_t(T) * sizeof(int32_t));
  uint32_t* keys_in = reinterpret_cast<uint32_t*>(ws);
  int32_t* vals_in = reinterpret_cast<int32_t*>(ws + arr);
  uint32_t* keys_out = reinterpret_cast<uint32_t*>(ws + 2 * arr);
  int32_t* vals_out = reinterpret_cast<int32_t*>(ws + 3 * arr);
  size_t temp_bytes = need_bytes - 4 * arr;
  embedding_keys_kernel<<<unsigned((T + kThreads - 1) / kThreads), kThreads, 0, stream>>>(ids, keys_in, vals_in, T, V);
  check_launch(fn);
  check_cuda(cub::DeviceRadixSort::SortPairs(ws + 4 * arr, temp_bytes, keys_in, keys_out, vals_in, vals_out, int(T), 0,
                                             key_bits(V), stream),
             "embedding_bwd: cub::DeviceRadixSort::SortPairs");
  const bool vec = C % 8 == 0 && aligned16(dout) && aligned16(dtable);
  const int64_t cols_per_block = kColLanes * (vec ? 8 : 1);
  const int64_t col_blocks = (C + cols_per_block - 1) / cols_per_block;
  need(col_blocks <= 65535, fn, "C too large (at most 65535 * 256 columns)");
  const dim3 grid{unsigned(T), unsigned(col_blocks)}, block{unsigned(kColLanes), unsigned(kRowLanes)};
  if (vec) embedding_bwd_kernel<true><<<grid, block, 0, stream>>>(keys_out, vals_out, bits(dout), dtable, T, V, C, scale);
  else embedding_bwd_kernel<false><<<grid, block, 0, stream>>>(keys_out, vals_out, bits(dout), dtable, T, V, C, scale);
  check_launch(fn);
}

}  // namespace flashkit::train::cuda
