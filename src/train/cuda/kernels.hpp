// CUDA training kernels (llm.c style: one small .cu per op in this folder) for Llama-3 / Gemma-3-style decoders.
// Plain C++ declarations: raw device pointers, sizes, a stream. No CUDA header is needed to include this file
// (cudaStream_t, cublasHandle_t and __nv_bfloat16 are declared the way the CUDA headers declare them).
//
// Conventions (every function):
// - Activations and activation gradients are bf16; master weights, weight gradients and Adam moments are f32.
//   All math is f32. Matrices are row-major [rows, cols]; a row stride `ld*` (in elements) is given only where a
//   caller slices a fused buffer (RMSNorm, RoPE); everything else is contiguous.
// - Weight gradients always ACCUMULATE (+=: gradient accumulation and tied embeddings need it; zero them with
//   cudaMemsetAsync at the start of a step). Activation gradients overwrite unless an `accumulate` flag says +=.
// - Every reduction is deterministic: a fixed tree and a fixed number of blocks that depends only on the sizes,
//   never on the device or on timing (no float atomics), so a run is bit-reproducible on the same GPU model.
// - The launchers check their arguments (negative or oversized sizes, null pointers for a non-empty tensor, odd
//   head_dim, too small workspace) and throw flashkit::Error(invalid_argument) naming the argument; a failed launch
//   throws flashkit::Error(device_error). Nothing is launched for an empty tensor. Kernels take 16-byte vector
//   loads when the sizes, strides and pointers allow it and a scalar path otherwise (same results).
// - Everything is stream-ordered; nothing synchronizes with the host (cuBLAS calls are set to `stream`).
// Designs and bytes-per-element floors: docs/worklog/training-cuda.md. f64 references: tests/train/cuda/.
#pragma once
#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;         // as cuda_runtime_api.h
typedef struct cublasContext* cublasHandle_t;     // as cublas_api.h
struct __nv_bfloat16;                             // as cuda_bf16.h

namespace flashkit::train::cuda {

using bf16 = __nv_bfloat16;

enum class Act : int32_t { silu = 0, gelu_tanh = 1 };  // gelu_tanh = gelu_pytorch_tanh (Gemma)

// ---------------------------------------------------------------- embedding (embedding.cu)
// out[t, :] = table[ids[t], :] * scale (Gemma: scale = sqrt(C); Llama: 1). An id outside [0, V) gives a NaN row.
void embedding_fwd(const int32_t* ids, const bf16* table, bf16* out, int64_t T, int64_t V, int64_t C, float scale,
                   cudaStream_t stream);
// dtable[v, :] += scale * sum over {t : ids[t] == v} of dout[t, :], summed in increasing t (deterministic). Ids
// outside [0, V) are skipped. Design: a stable device radix sort of (id, t) pairs (CUB), then one block per run of
// equal ids (no atomics). `workspace` >= embedding_bwd_workspace_bytes(T, V) bytes of device memory.
size_t embedding_bwd_workspace_bytes(int64_t T, int64_t V);
void embedding_bwd(const int32_t* ids, const bf16* dout, float* dtable, int64_t T, int64_t V, int64_t C, float scale,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream);

// ---------------------------------------------------------------- RMSNorm (rmsnorm.cu)
// Each row t of x holds `groups` groups of C columns (groups = 1: the hidden-state norm; groups = heads: Gemma's
// per-head q/k norm on [T, heads * head_dim], C = head_dim, one weight [C] shared by the heads). Group (t, g)
// starts at t * ld + g * C in x, y, dy and dx (each its own ld; ld >= groups * C). For group r = t * groups + g:
//   rstd[r] = 1 / sqrt(mean(x_r^2) + eps),  y_r = x_r * rstd[r] * (plus_one ? 1 + w : w)   (Gemma: plus_one)
// rstd (f32 [T * groups]) may be nullptr (inference). w is f32 (the master weight) or bf16. y may alias x when
// ldy == ldx.
void rmsnorm_fwd(const bf16* x, int64_t ldx, const float* w, bf16* y, int64_t ldy, float* rstd, int64_t T,
                 int64_t groups, int64_t C, float eps, bool plus_one, cudaStream_t stream);
void rmsnorm_fwd(const bf16* x, int64_t ldx, const bf16* w, bf16* y, int64_t ldy, float* rstd, int64_t T,
                 int64_t groups, int64_t C, float eps, bool plus_one, cudaStream_t stream);
// Backward, with rstd from the forward: g = dy * (plus_one ? 1 + w : w), xhat = x * rstd,
//   dx = rstd * (g - xhat * mean(g * xhat))   (written, or added when dx_accumulate: the residual stream)
//   dw[c] += sum over groups of dy * xhat      (deterministic: per-block partials in `scratch`, then one
//                                               reduction kernel summing them in block order)
// dx may alias dy when lddx == lddy and !dx_accumulate. `scratch` >= rmsnorm_bwd_scratch_floats(T, groups, C) f32.
int64_t rmsnorm_bwd_scratch_floats(int64_t T, int64_t groups, int64_t C);
void rmsnorm_bwd(const bf16* dy, int64_t lddy, const bf16* x, int64_t ldx, const float* w, const float* rstd,
                 bf16* dx, int64_t lddx, bool dx_accumulate, float* dw, float* scratch, int64_t T, int64_t groups,
                 int64_t C, bool plus_one, cudaStream_t stream);

// ---------------------------------------------------------------- RoPE (rope.cu)
// HF rotate-half RoPE (as src/engine/cuda/pointwise.cu and the CPU backends) on x [T, heads, head_dim] with row
// stride ldx (>= heads * head_dim; q or k sliced out of a fused QKV row). Row t's position p is positions[t], or
// t % seq_len when positions is null (batch-major rows of equal-length sequences). For i < h = head_dim / 2,
//   fwd: out[i] = x[i] c - x[i + h] s,   out[i + h] = x[i + h] c + x[i] s
//   bwd: dx[i] = dy[i] c + dy[i + h] s,  dx[i + h] = dy[i + h] c - dy[i] s       (the transposed rotation)
// with c, s = cos, sin of angle a = float(p) * inv_freq[i] (an f32 product, as HF computes it; sincosf in f32).
// out may alias x (in place) when ldo == ldx. head_dim must be even.
void rope_fwd(const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions, int64_t seq_len,
              const float* inv_freq, int64_t T, int64_t heads, int64_t head_dim, cudaStream_t stream);
void rope_bwd(const bf16* dy, int64_t lddy, bf16* dx, int64_t lddx, const int32_t* positions, int64_t seq_len,
              const float* inv_freq, int64_t T, int64_t heads, int64_t head_dim, cudaStream_t stream);
// The same with precomputed tables c = cos[p, i], s = sin[p, i], [max_pos, head_dim / 2] contiguous, bf16 (HF's
// bf16 models round cos/sin to the activation dtype) or f32, already multiplied by any attention factor. A position
// outside [0, max_pos) gives NaN outputs.
void rope_fwd_table(const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions, int64_t seq_len,
                    const bf16* cos, const bf16* sin, int64_t max_pos, int64_t T, int64_t heads, int64_t head_dim,
                    cudaStream_t stream);
void rope_bwd_table(const bf16* dy, int64_t lddy, bf16* dx, int64_t lddx, const int32_t* positions, int64_t seq_len,
                    const bf16* cos, const bf16* sin, int64_t max_pos, int64_t T, int64_t heads, int64_t head_dim,
                    cudaStream_t stream);
void rope_fwd_table(const bf16* x, int64_t ldx, bf16* out, int64_t ldo, const int32_t* positions, int64_t seq_len,
                    const float* cos, const float* sin, int64_t max_pos, int64_t T, int64_t heads, int64_t head_dim,
                    cudaStream_t stream);
void rope_bwd_table(const bf16* dy, int64_t lddy, bf16* dx, int64_t lddx, const int32_t* positions, int64_t seq_len,
                    const float* cos, const float* sin, int64_t max_pos, int64_t T, int64_t heads, int64_t head_dim,
                    cudaStream_t stream);

// ---------------------------------------------------------------- gated activation (gated_act.cu)
// gate_up [T, 2F] holds the gate in columns [0, F) and up in [F, 2F) (the engine's fused gate/up layout).
//   fwd: out[t, f] = act(gate) * up                                              out [T, F]
//   bwd: dgate = dout * up * act'(gate), dup = dout * act(gate)                 dgate_up [T, 2F], same layout
// dgate_up may alias gate_up (overwritten in place).
void gated_act_fwd(const bf16* gate_up, bf16* out, int64_t T, int64_t F, Act act, cudaStream_t stream);
void gated_act_bwd(const bf16* dout, const bf16* gate_up, bf16* dgate_up, int64_t T, int64_t F, Act act,
                   cudaStream_t stream);

// ---------------------------------------------------------------- cross-entropy over a chunk of rows (cross_entropy.cu)
// logits f32 [R, ld] (ld >= V; columns [V, ld) are vocabulary padding and take no part), the lm_head output z of a
// chunk of R rows. With softcap > 0 (Gemma's final logit softcapping) l = softcap * tanh(z / softcap), else l = z.
//   loss[r]   = logsumexp(l_r) - l_r[targets[r]]   (0 when targets[r] == -1; NaN when outside [0, V) otherwise)
//   logits[r] <- scale * (softmax(l_r) - onehot(targets[r])) * dl/dz     (in place: dloss/dz * scale;
//                 dl/dz = 1 - (l / softcap)^2 with softcap, else 1; a row whose target is -1 or invalid gets
//                 0, and so does the padding)
// scale is typically 1 / (number of non-ignored targets in the whole batch, over all micro-batches); loss is not
// scaled. dlogits_bf16 (nullable) receives a bf16 copy of the written gradient [R, ld] (the input of the cuBLAS
// dX = dZ W and dW += dZ^T X that follow). One block per row, online max/sum: two passes over the row.
void cross_entropy_chunk_fwd_bwd(float* logits, int64_t ld, const int32_t* targets, float* loss, bf16* dlogits_bf16,
                                 int64_t R, int64_t V, float scale, float softcap, cudaStream_t stream);

// ---------------------------------------------------------------- optimizer (adamw.cu)
// One AdamW step (PyTorch's torch.optim.AdamW formula, decoupled weight decay) over n parameters, f32:
//   g = grad * grad_scale                   (grad_scale folds in gradient clipping: min(1, max_norm / norm))
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
//   param = param * (1 - lr * weight_decay) - lr / (1 - beta1^step) * m / (sqrt(v / (1 - beta2^step)) + eps)
// step >= 1 counts from 1 (bias correction). param_bf16 (nullable) receives bf16(param) (the copy the forward
// reads). Call once per contiguous range of the parameter arena with that range's weight_decay.
void adamw_step(float* param, const float* grad, float* m, float* v, bf16* param_bf16, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale,
                cudaStream_t stream);

// ---------------------------------------------------------------- reductions (reduce.cu)
// out[0] (= or += when accumulate) sum of x[i]^2 (global_norm_sq) or of x[i] (sum_f32, e.g. a chunk's losses), f32;
// a NaN or inf in x makes it NaN or inf.
// Deterministic two-pass: reduce_partials(n) blocks write partial sums to `scratch`, then one block adds them in
// order. `scratch` >= reduce_scratch_floats() f32.
int64_t reduce_scratch_floats();
void global_norm_sq(const float* x, int64_t n, float* out, bool accumulate, float* scratch, cudaStream_t stream);
void sum_f32(const float* x, int64_t n, float* out, bool accumulate, float* scratch, cudaStream_t stream);
// out[0] (= or +=) the number of NaN or infinite x[i], as a float (exact below 2^24; only "> 0" matters: the
// step's loss / gradient check).
void count_nonfinite(const float* x, int64_t n, float* out, bool accumulate, float* scratch, cudaStream_t stream);

// ---------------------------------------------------------------- elementwise (elementwise.cu)
void scale_inplace(float* x, int64_t n, float s, cudaStream_t stream);    // x *= s
void scale_inplace(bf16* x, int64_t n, float s, cudaStream_t stream);
void cast_f32_to_bf16(const float* src, bf16* dst, int64_t n, cudaStream_t stream);  // round to nearest even
void cast_bf16_to_f32(const bf16* src, float* dst, int64_t n, cudaStream_t stream);
void add_inplace(bf16* y, const bf16* x, int64_t n, cudaStream_t stream);  // y += x (residual gradients)
void add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream);
void add_inplace(float* y, const bf16* x, int64_t n, cudaStream_t stream);  // f32 accumulator += bf16

// ---------------------------------------------------------------- matmul (matmul.cu, cuBLAS)
// Row-major C[M, N] = alpha * op(A) op(B) + beta * C with bf16 A and B, f32 accumulation (cublasGemmEx,
// CUBLAS_COMPUTE_32F), C bf16 or f32 (c_f32). op(A) is [M, K]: A stored [M, K] (lda >= K) or, when trans_a, A
// stored [K, M] (lda >= M) and used transposed; op(B) is [K, N]: B stored [K, N] (ldb >= N) or, when trans_b,
// stored [N, K] (ldb >= K). C has row stride ldc >= N. The handle is set to `stream`. (cuBLAS documents its results
// as bit-reproducible on the same GPU architecture, SM count and toolkit version.)
void matmul_bf16(cublasHandle_t handle, const bf16* A, int64_t lda, bool trans_a, const bf16* B, int64_t ldb,
                 bool trans_b, void* C, int64_t ldc, bool c_f32, int64_t M, int64_t N, int64_t K, float alpha,
                 float beta, cudaStream_t stream);
// The three products of a linear layer Y = X W^T, X [T, K], W [N, K], all contiguous:
//   forward  Y [T, N] = X W^T          (Y bf16, or f32 for the lm_head logits chunk: y_f32)
//   backward dX [T, K] = dY W          (= or += when accumulate; dX bf16)
//            dW [N, K] += dY^T X       (f32 master-gradient accumulation)
void linear_fwd(cublasHandle_t handle, const bf16* X, const bf16* W, void* Y, bool y_f32, int64_t T, int64_t N,
                int64_t K, cudaStream_t stream);
void linear_bwd_dx(cublasHandle_t handle, const bf16* dY, const bf16* W, bf16* dX, bool accumulate, int64_t T,
                   int64_t N, int64_t K, cudaStream_t stream);
void linear_bwd_dw(cublasHandle_t handle, const bf16* dY, const bf16* X, float* dW, int64_t T, int64_t N, int64_t K,
                   cudaStream_t stream);

}  // namespace flashkit::train::cuda
