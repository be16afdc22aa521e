// Launchers of the CUDA engine kernels (src/engine/cuda/*.cu). Plain C++ declarations: raw device pointers, shapes,
// a stream. No CUDA header is needed to include this file (cudaStream_t is declared the way cuda_runtime.h does).
//
// Graph rule: per-step values (token ids, positions) are never launcher arguments; kernels read them from the
// device step buffer (`const int32_t* tokens`, `const int32_t* pos0`), so a captured launch replays correctly.
// Every launcher checks its launch (cudaGetLastError) and throws flashkit::Error(device_error) on failure;
// arguments are trusted (the backend checks shapes once).
//
// Programmatic dependent launch (sm_90): every kernel is launched with the PDL attribute when the device supports
// it (Tuning::cuda_pdl = false, FLASHKIT_CUDA_PDL=0, disables). Kernels signal their dependents at entry, may load constants (weights) before
// waiting for the preceding grid (griddepcontrol.wait), and touch activations only after that wait; nothing is
// written before it. One exception, in the decode attention: it reads the step buffer's position and the cache rows
// of earlier positions before the wait, because no kernel of a step writes them (the step buffer is uploaded by a
// stream-ordered copy, which waits for every earlier kernel, and row j < p was written by an earlier step).
#pragma once
#include <cstddef>
#include <cstdint>

#include "flashkit/tuning.hpp"
#include "kernels/cuda/decode/fused_prologue.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace flashkit::engine::cuda {

enum class Act : int32_t { none = 0, gelu_tanh = 1, silu = 2 };

// ---------------------------------------------------------------- launch settings (device.cpp)
// The Tuning the launchers of this thread use: the backend installs its own around its launches
// (ScopedLaunchTuning); without one, the process default (default_tuning()).
class ScopedLaunchTuning {
 public:
  explicit ScopedLaunchTuning(const Tuning& t);
  ~ScopedLaunchTuning();
  ScopedLaunchTuning(const ScopedLaunchTuning&) = delete;
  ScopedLaunchTuning& operator=(const ScopedLaunchTuning&) = delete;

 private:
  const Tuning* prev_;
};
const Tuning& launch_tuning();
// True when kernels are launched with programmatic dependent launch (device >= sm_90 and Tuning::cuda_pdl).
bool pdl_enabled();
int sm_count();  // multiprocessors of the current device
// A/B switches of the GEMV (Tuning): gemv_prefetch adds an L2 bulk prefetch of each block's weight stripe (off by
// default: it measured 3-8% slower on the H200), gemv_streaming_loads = false loads weights with ld.global.nc
// instead of the streaming (evict-first) ld.global.cs.
bool gemv_prefetch_enabled();
bool gemv_streaming_loads();

// ---------------------------------------------------------------- GEMV (gemv.cu), decode-sized T <= 8
// y[t, n] = sum_k a[t, k] * W[n, k], W bf16 row-major [N (x2 when gated), K], f32 accumulation.
// The input rows a[t, :] are formed in shared memory by a prologue (every block recomputes it; it is O(K)):
//   h = x (+ d, or + rms_norm(d) * post_w when post_w);  h written to h_out when h_out (the residual stream)
//   a = h, or rms_norm(h) * norm_w when norm_w;          a written to a_out when a_out
// When h_out / a_out overlap neither x nor d, every block writes its slice of them. When they alias x (the residual
// or the norm updated in place), the last block to finish writes them, after every block has read x (an atomic
// arrival counter, reset by that block, so the launch stays graph-replayable; it costs ~1 us, so the backend
// prefers a shadow buffer for the residual: cuda_backend.cpp, residual ping-pong).
struct GemvIn {
  const void* x = nullptr;  // [T, K] rows of stride ldx
  bool x_bf16 = false;
  int64_t ldx = 0;
  const float* d = nullptr;  // optional delta [T, K] f32, stride ldd
  int64_t ldd = 0;
  const float* post_w = nullptr;  // optional rms_norm weight applied to d before the add
  float* h_out = nullptr;         // optional: where h goes (f32, stride ldh)
  int64_t ldh = 0;
  const float* norm_w = nullptr;  // optional rms_norm weight applied to h
  float* a_out = nullptr;         // optional: where a goes (f32, stride lda)
  int64_t lda = 0;
  float eps = 1e-6f;
};
// Epilogue: v = acc (+ bias[n]); gated (act != none): W holds 2N rows [gate; up], v = act(gate_n) * up_n (gate and
// up are written pre-activation to gu_out when set, [T, 2N] stride ldgu); softcap > 0: v = cap * tanh(v / cap);
// residual: v += residual[t, n] (residual may alias y); y f32 or bf16.
struct GemvOut {
  void* y = nullptr;
  bool y_bf16 = false;
  int64_t ldy = 0;
  const float* bias = nullptr;  // [N] (gated: [2N])
  Act act = Act::none;
  float* gu_out = nullptr;
  int64_t ldgu = 0;
  float softcap = 0.0f;
  const float* residual = nullptr;
  int64_t ldr = 0;
  // Mamba conv epilogue (T == 1, not gated; engine/mamba_fusion.hpp): outputs n < conv_channels are also the x
  // channels of a causal conv1d step. The lane that writes y[n] shifts conv_state row n (the last conv_width inputs)
  // by one, appends v, and writes conv_out[n] = silu(conv_b[n] + sum_k conv_w[n, k] * row[k]) -- the arithmetic of
  // the library's conv1d kernel (kernels/cuda/ssm/scan.cu). conv_state, conv_w: [conv_channels, conv_width] dense.
  const float* conv_w = nullptr;
  const float* conv_b = nullptr;  // optional
  float* conv_state = nullptr;
  float* conv_out = nullptr;
  int64_t conv_channels = 0;
  int conv_width = 0;
};
// Rows per launch (more rows: several launches). The backend uses the GEMV for T <= 8 (cuBLAS above) except in
// decode-exact steps, where any T stays on it: each output row is bitwise the one-row launch's (gemv.cu).
constexpr int64_t kGemvMaxRowsPerLaunch = 16;
// T >= 1, K % 8 == 0, W 16-byte aligned. `counter`: one zero-initialized device uint32 (needed when h_out or
// a_out alias an input; left at zero after the launch). Throws invalid_argument on T/K out of range.
void gemv_bf16(const GemvIn& in, const uint16_t* W, int64_t N, int64_t K, int T, const GemvOut& out,
               unsigned int* counter, cudaStream_t stream);

// ---------------------------------------------------------------- Mamba decode mixer step (mamba_step.cu)
// One row (T == 1) of x_proj, dt_proj and the selective-scan step in one launch (engine/mamba_fusion.hpp: shapes
// it takes, mamba_mixer_step_ok). Every block gets dbc = W_x . xc (the whole x_proj output, which every channel
// needs): it computes it alone, or with the other blocks of its cluster (sm_90; mamba_step_cluster), each its share
// of the rows, exchanged through distributed shared memory. Then for its 32, 16 or 8 channels
// dt = W_dt[c] . dbc[:dt_rank] + dt_bias[c], the state update h = exp(softplus(dt) A) h + softplus(dt) B x and
// y = (C . h + D x) silu(z). Every dot product is summed in the GEMV's order (lane l: 8-weight chunks l, l + 32, ...,
// then the warp butterfly) and the scan step in the scan kernel's, so the outputs match the unfused ops'. Writes what
// the unfused ops write: dbc (block 0), dt (pre-softplus), y and the state.
struct MambaStepArgs {
  const float* xc = nullptr;       // [d_inner] conv output (the scan's u)
  const float* z = nullptr;        // [d_inner] gate input
  const uint16_t* w_x = nullptr;   // x_proj [dt_rank + 2 d_state, d_inner] bf16, 16-byte aligned
  const uint16_t* w_dt = nullptr;  // dt_proj [d_inner, dt_rank] bf16, 16-byte aligned
  const float* dt_bias = nullptr;  // [d_inner], optional
  const float* A = nullptr;        // [d_inner, d_state]: -exp(A_log)
  const float* D = nullptr;        // [d_inner], optional
  float* state = nullptr;          // [d_inner, d_state], updated
  float* dbc = nullptr;            // [dt_rank + 2 d_state]: x_proj's output (dt_low, B, C)
  float* dt = nullptr;             // [d_inner]: dt_proj's output
  float* y = nullptr;              // [d_inner]
  int64_t d_inner = 0;
  int dt_rank = 0, d_state = 0;
  int channels = 0;  // per block: 0 = mamba_step_channels' choice; 32, 16, 8 forced (Tuning::cuda_mamba_channels)
  int cluster = 0;   // blocks per cluster: 0 = mamba_step_cluster's choice for this device; tests force 1..16
};
// Throws invalid_argument when the shapes are outside what mamba_mixer_step_ok accepts or a forced cluster size
// cannot run on this device.
void mamba_mixer_step(const MambaStepArgs& a, cudaStream_t stream);

// ---------------------------------------------------------------- small ops (pointwise.cu); rows of stride ld
// out[t, :] = table row tokens[t] * scale (table bf16 or f32; tokens read from the device step buffer; an id outside
// [0, vocab) gives a NaN row). out f32 or bf16.
void embed(const void* table, bool table_bf16, int64_t ldtab, int64_t vocab, const int32_t* tokens, void* out,
           bool out_bf16, int64_t ldo, int64_t T, int64_t cols, float scale, cudaStream_t stream);
// out = rms_norm(x) * w per group of `group` columns; out may alias x. x/out f32 or bf16 (same dtype).
void rms_norm(const void* x, int64_t ldx, const float* w, void* out, int64_t ldo, bool bf16, int64_t T,
              int64_t cols, int64_t group, float eps, cudaStream_t stream);
// The same with separate dtypes (the f32 residual stream normed into a bf16 row); out may alias x only when the
// dtypes are equal.
void rms_norm(const void* x, int64_t ldx, bool x_bf16, const float* w, void* out, int64_t ldo, bool out_bf16,
              int64_t T, int64_t cols, int64_t group, float eps, cudaStream_t stream);
// residual += rms_norm(x) * w (one group = cols); x f32 or bf16, residual f32 or bf16 (same flag).
void add_rms_norm(const void* x, int64_t ldx, const float* w, void* residual, int64_t ldr, bool bf16, int64_t T,
                  int64_t cols, float eps, cudaStream_t stream);
// y += x
void add(const void* x, int64_t ldx, void* y, int64_t ldy, bool bf16, int64_t T, int64_t cols, cudaStream_t stream);
// x = cap * tanh(x / cap)
void softcap(void* x, int64_t ldx, bool bf16, int64_t T, int64_t cols, float cap, cudaStream_t stream);
// out[t, f] = act(gu[t, f]) * gu[t, F + f]
void gated_act(const void* gu, int64_t ldgu, void* out, int64_t ldo, bool bf16, int64_t T, int64_t F, Act act,
               cudaStream_t stream);
// HF rotate-half RoPE in place on x [T, heads * head_dim]; position of row t = *pos0 + t.
void rope(void* x, int64_t ldx, bool bf16, int64_t T, int64_t heads, int64_t head_dim, const float* inv_freq,
          float attn_scaling, const int32_t* pos0, cudaStream_t stream);
// The same with the position of row t = positions[t] (device; a batched paged step's rows).
void rope_positions(void* x, int64_t ldx, bool bf16, int64_t T, int64_t heads, int64_t head_dim,
                    const float* inv_freq, float attn_scaling, const int32_t* positions, cudaStream_t stream);
// Writes rows t of k/v [T, kvd] into cache rows (pos0 + t) (mod capacity when ring). Cache [capacity, kvd], bf16 or
// f32 (cache_bf16). When ring and T > capacity only the last `capacity` rows are stored.
void kv_append(const void* k, int64_t ldk, const void* v, int64_t ldv, bool src_bf16, void* kc, void* vc,
               bool cache_bf16, int64_t kvd, int64_t capacity, bool ring, int64_t T, const int32_t* pos0,
               cudaStream_t stream);
// Gathers the `n_old` positions before pos0_host (row p, or p % capacity for a ring) in position order, then the T
// new rows, into contiguous bf16 [n_old + T, kvd] buffers (prefill: the keys a chunk attends to). The host passes
// pos0 (prefill is not a graph path).
void kv_gather(const void* kc, const void* vc, bool cache_bf16, int64_t capacity, bool ring, int64_t kvd,
               int64_t pos0_host, int64_t n_old, const void* k, int64_t ldk, const void* v, int64_t ldv, bool src_bf16,
               int64_t T, uint16_t* ko, uint16_t* vo, cudaStream_t stream);
// y[t, n] += bias[n]
void add_bias(void* y, int64_t ldy, bool bf16, const float* bias, int64_t T, int64_t N, cudaStream_t stream);
// dst[r, c] = bf16(src[r, c]) (or f32 copy when dst_bf16 is false), strided rows.
void convert_rows(const void* src, bool src_bf16, int64_t lds, void* dst, bool dst_bf16, int64_t ldd, int64_t rows,
                  int64_t cols, cudaStream_t stream);

// ---------------------------------------------------------------- greedy argmax (argmax.cu)
// out[0] = the lowest index of the maximum of x[0, n) (f32; +0 == -0), or -1 when the row is invalid for sampling;
// out[1] = flags: 1 = invalid (a NaN or +inf, or only -inf), 2 = the maximum occurs more than once. One launch with
// a last-block merge: `part` >= argmax_part_bytes(n) bytes of scratch, `counter` one zero-initialized uint32 (left
// at zero), so the launch is graph-replayable.
int64_t argmax_part_bytes(int64_t n);
void argmax_f32(const float* x, int64_t n, void* part, unsigned int* counter, int32_t* out, cudaStream_t stream);
// The same for each of `rows` rows of x (row stride ld): out[2 r], out[2 r + 1] = row r's index and flags.
void argmax_rows_f32(const float* x, int64_t ld, int64_t rows, int64_t n, int32_t* out, cudaStream_t stream);

// ---------------------------------------------------------------- decode attention (attention_decode.cpp)
// The decode family's fused_prologue kernel (kernels/cuda/decode/fused_prologue.hpp: arguments and semantics),
// planned by kernels/cuda/decode/plan.hpp. `merge` selects the split merge: automatic (a cluster where the device
// allows and the heads leave room), global (the last-block merge only), cluster (a cluster wherever the device
// allows; tests); the backend sets it from its Tuning.
using DecodeMerge = flashkit::EngineDecodeMerge;
using DecodeAttnArgs = flashkit::cuda::FusedDecodeArgs;
int64_t decode_attention_part_floats(int heads, int head_dim, int splits);
// A split count for a layer whose visible-key count can reach max_keys (fixed per launch site).
int decode_attention_splits(int heads, int64_t max_keys);
// The cluster size (blocks along the split dimension) decode_attention(a) launches with; 1 when it uses no cluster.
// A launch merges in the cluster when the splits it uses (from the visible-key count) are at most this many.
int decode_attention_cluster_size(const DecodeAttnArgs& a);
void decode_attention(const DecodeAttnArgs& a, cudaStream_t stream);
// A decode-exact verification step's attention (Backend::StepShape::decode_exact): `rows` query rows at positions
// *a.pos0 + r, each one launch of decode_attention exactly as a one-row decode step at that position makes it (same
// plan and splits; q, k, v and out advanced by r rows of stride ldq / ldk / ldv / ldo elements), in row order, so
// row r attends to the keys rows < r appended. Graph-safe like decode_attention.
void decode_attention_rows(const DecodeAttnArgs& a, int64_t rows, int64_t ldq, int64_t ldk, int64_t ldv, int64_t ldo,
                           cudaStream_t stream);

}  // namespace flashkit::engine::cuda
