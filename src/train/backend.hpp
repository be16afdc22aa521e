// The training backend: memory and the per-op math of a decoder's forward and backward pass, behind one small
// interface. The model code (src/train/model.cpp) owns the schedule (which op, on which buffers, what is saved
// for the backward); a backend owns memory and kernels. The CPU backend (cpu_backend.cpp) is templated on the
// scalar type: f32 for training, f64 for the finite-difference gradient tests.
//
// A CUDA backend is meant to be a thin wrapper over src/train/cuda/kernels.hpp (plain functions: pointer + size
// + stream, bf16 activations, f32 master weights and AdamW), cuBLAS for matmul and flashkit::attention_forward /
// attention_backward on CUDA TensorViews. The interface is shaped for that:
//   * every buffer is a Mat {data, dtype, rows, cols, ld} on the backend's device; ops take shapes, buffers and
//     constants only (no host round trips inside a step), so they map 1:1 onto kernel launches on one stream;
//   * param_dtype() (master weights, gradients, Adam moments: f32) and act_dtype() (activations: the CPU uses
//     the parameter type, a CUDA backend bf16) are separate. matmul() may mix them: C in f32 (weight gradients
//     accumulate into the f32 gradient arena) from A/B in the activation type. A backend that computes in a
//     narrower type than the master weights keeps its own copy of the parameter arena (cast_f32_to_bf16) and
//     refreshes it in params_updated(), called after every optimizer step and after loading weights; matmul()
//     receives master-arena pointers and maps them to that copy (same offsets).
//   * parameters, gradients and optimizer moments are each ONE flat arena (src/train/arena.hpp), so the
//     optimizer, the gradient norm and gradient zeroing are one call over a contiguous range.
//
// Conventions (the CUDA kernels follow the same ones):
//   rows r of an activation buffer are tokens: batch-major, r = b * seq_len + t, position t = r % seq_len.
//   rmsnorm:   y = x * rstd * (w or 1 + w), rstd = 1 / sqrt(mean(x^2) + eps) over each group of `group` columns;
//              rstd is saved in the parameter dtype (f32; f64 in the gradient tests) as [rows, cols / group].
//   rope:      HF "rotate half": for i < d/2, (x_i, x_{i+d/2}) rotated by the angle of (position, i); the cos and
//              sin tables are [max_seq, d/2] in the activation dtype, already multiplied by the attention factor.
//   gated_act: out[r, f] = act(gu[r, f]) * gu[r, F + f], gu = [gate | up]; act = silu or gelu_tanh.
//   cross_entropy_chunk: given z = logits [R, V] (f32 on CUDA, the parameter type on the CPU), optional soft-cap
//              c: z = c * tanh(z / c); loss[r] = logsumexp(z_r) - z_r[target_r]; z is overwritten by
//              d loss[r] / d logits * grad_scale (0 for target -1, whose loss is 0).
//   Gradient outputs named d* with `accumulate` add into their destination; weight gradients always add.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "flashkit/dtype.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit::train {

// A 2-D row-major view [rows, cols] with row stride ld (elements) on the backend's device. Non-owning.
struct Mat {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t rows = 0, cols = 0, ld = 0;
  bool empty() const { return data == nullptr; }
  int64_t numel() const { return rows * cols; }
  Mat col_slice(int64_t c0, int64_t n) const {
    Mat m = *this;
    m.data = static_cast<char*>(data) + c0 * dtype_size(dtype);
    m.cols = n;
    return m;
  }
  Mat row_slice(int64_t r0, int64_t n) const {
    Mat m = *this;
    m.data = static_cast<char*>(data) + r0 * ld * dtype_size(dtype);
    m.rows = n;
    return m;
  }
  // Elements [off, off + rows * cols) of a contiguous buffer, viewed as [rows, cols].
  Mat view(int64_t off, int64_t r, int64_t c) const {
    Mat m = *this;
    m.data = static_cast<char*>(data) + off * dtype_size(dtype);
    m.rows = r;
    m.cols = c;
    m.ld = c;
    return m;
  }
};

enum class Act { silu, gelu_tanh };

// One attention call over a batch of equal-length causal sequences. q/o [B*T, heads*hd] and k/v
// [B*T, kv_heads*hd] (any row stride: column slices of the fused qkv buffer), lse f32 [B, heads, T].
struct AttnShape {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0, softcap = 0;
  int64_t window = 0;  // 0: global; else key j visible to query i iff i - window < j <= i (HF sliding)
};

struct AdamW {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  float grad_scale = 1;  // multiplies the gradient first (clipping)
  int64_t step = 1;      // 1-based, for the bias corrections
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  virtual DType param_dtype() const = 0;
  virtual DType act_dtype() const = 0;

  // ---- memory (contiguous, ld = cols, zero-filled) ----
  virtual Mat alloc(DType dtype, int64_t rows, int64_t cols) = 0;
  virtual void free(Mat& m) = 0;
  virtual void upload(const Mat& dst, const void* host, size_t bytes) = 0;  // contiguous
  virtual void download(void* host, const Mat& src, size_t bytes) = 0;      // contiguous; synchronizes
  virtual void zero(const Mat& m) = 0;                                       // contiguous
  virtual void copy(const Mat& dst, const Mat& src) = 0;                     // same shape and dtype, any ld
  virtual void synchronize() {}
  // The master parameter arena changed (optimizer step, checkpoint load): refresh derived copies.
  virtual void params_updated(const Mat& /*params*/) {}

  // ---- forward / backward ops ----
  // out[r] = table[ids[r]] * scale; ids: i32 [rows, 1] on the device.
  virtual void embedding_fwd(const Mat& ids, const Mat& table, const Mat& out, float scale) = 0;
  // dtable[ids[r]] += scale * dout[r]
  virtual void embedding_bwd(const Mat& ids, const Mat& dout, const Mat& dtable, float scale) = 0;
  // out may alias x. w: [1, group] in the parameter dtype; rstd [rows, cols / group] in the parameter dtype.
  virtual void rmsnorm_fwd(const Mat& x, const Mat& w, const Mat& out, const Mat& rstd, int64_t group, float eps,
                           bool plus_one) = 0;
  // dx (= or += with accumulate) and dw += from dout, the saved input x and rstd. dx may alias dout when
  // accumulate is false.
  virtual void rmsnorm_bwd(const Mat& dout, const Mat& x, const Mat& w, const Mat& rstd, const Mat& dx,
                           const Mat& dw, int64_t group, bool plus_one, bool accumulate) = 0;
  // C = alpha * op(A) . op(B) + beta * C, op = transpose when the flag is set; shapes from the views
  // (op(A) [M, K], op(B) [K, N], C [M, N]).
  virtual void matmul(const Mat& A, bool transA, const Mat& B, bool transB, const Mat& C, float alpha,
                      float beta) = 0;
  // In place on x [B*T, heads*hd]; backward (inverse rotation) on the gradient.
  virtual void rope_fwd(const Mat& x, int64_t seq, int64_t heads, int64_t head_dim, const Mat& cos,
                        const Mat& sin) = 0;
  virtual void rope_bwd(const Mat& dx, int64_t seq, int64_t heads, int64_t head_dim, const Mat& cos,
                        const Mat& sin) = 0;
  virtual void attention_fwd(const Mat& q, const Mat& k, const Mat& v, const Mat& o, const Mat& lse,
                             const AttnShape& s) = 0;
  // dq/dk/dv are written (not accumulated).
  virtual void attention_bwd(const Mat& dout, const Mat& q, const Mat& k, const Mat& v, const Mat& o,
                             const Mat& lse, const Mat& dq, const Mat& dk, const Mat& dv, const AttnShape& s) = 0;
  virtual void gated_act_fwd(const Mat& gu, const Mat& out, Act act) = 0;
  virtual void gated_act_bwd(const Mat& dout, const Mat& gu, const Mat& dgu, Act act) = 0;
  virtual void add_inplace(const Mat& y, const Mat& x) = 0;  // y += x
  // See the header comment. targets: i32 [rows, 1]; losses: f32 [rows, 1] (written).
  virtual void cross_entropy_chunk(const Mat& logits, const Mat& targets, const Mat& losses, float softcap,
                                   float grad_scale) = 0;

  // ---- Mamba-1 ops (selective state space); a backend without them says so in supports_ssm() ----
  // Layouts as include/flashkit/ssm.hpp with rows r = b * seq + t: x / out / u / delta / z / y [B*T, Di] and
  // Bm / Cm [B*T, N], any row stride (column slices of the projections); conv weight [Di, W], A_log [Di, N],
  // D / conv bias / delta bias [1, Di] in the parameter dtype (bias may be empty).
  virtual bool supports_ssm() const { return false; }
  // out = silu(bias + causal depthwise conv1d(x)) per sequence of `seq` rows.
  virtual void conv1d_silu_fwd(const Mat& x, const Mat& w, const Mat& bias, const Mat& out, int64_t seq);
  // dx written; dw, dbias (when not empty) accumulated. The pre-activation is recomputed from x.
  virtual void conv1d_silu_bwd(const Mat& dout, const Mat& x, const Mat& w, const Mat& bias, const Mat& dx,
                               const Mat& dw, const Mat& dbias, int64_t seq);
  // y = scan(u, softplus(delta + delta_bias), A = -exp(A_log), Bm, Cm) + D u, times silu(z).
  virtual void selective_scan_fwd(const Mat& u, const Mat& delta, const Mat& A_log, const Mat& Bm, const Mat& Cm,
                                  const Mat& D, const Mat& z, const Mat& delta_bias, const Mat& y, int64_t seq);
  // du, ddelta, dBm, dCm, dz written; dA_log, dD, ddelta_bias accumulated.
  virtual void selective_scan_bwd(const Mat& dy, const Mat& u, const Mat& delta, const Mat& A_log, const Mat& Bm,
                                  const Mat& Cm, const Mat& D, const Mat& z, const Mat& delta_bias, const Mat& du,
                                  const Mat& ddelta, const Mat& dBm, const Mat& dCm, const Mat& dz,
                                  const Mat& dA_log, const Mat& dD, const Mat& ddelta_bias, int64_t seq);

  // ---- optimizer over flat arenas ([1, n] views of the parameter dtype) ----
  virtual double global_norm_sq(const Mat& g) = 0;  // sum of squares, deterministic order; synchronizes
  virtual void adamw_step(const Mat& params, const Mat& grads, const Mat& m, const Mat& v, const AdamW& h) = 0;
  virtual void scale_inplace(const Mat& x, float s) = 0;
  // Whether any element is NaN or infinite (the loss check of a step); synchronizes.
  virtual bool all_finite(const Mat& x) = 0;
};

// CPU backends: f32 (training) and f64 (gradient tests). threads 0: flashkit::num_threads().
std::unique_ptr<Backend> make_cpu_backend(DType dtype, int threads = 0);
// The CUDA backend (Status::unsupported until it exists / in CPU builds).
std::unique_ptr<Backend> make_cuda_backend(int device_index);

}  // namespace flashkit::train

#include <vector>

namespace flashkit::train {

// Host doubles into a contiguous buffer of the backend's f32 / f64 / bf16 type, and back.
inline void upload_converted(Backend& be, const Mat& dst, const std::vector<double>& host) {
  const size_t n = host.size();
  if (dst.dtype == DType::f64) {
    be.upload(dst, host.data(), n * 8);
  } else if (dst.dtype == DType::f32) {
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = float(host[i]);
    be.upload(dst, f.data(), n * 4);
  } else {
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(float(host[i]));
    be.upload(dst, h.data(), n * 2);
  }
}
inline void download_converted(Backend& be, const Mat& src, double* host) {
  const size_t n = size_t(src.numel());
  if (src.dtype == DType::f64) {
    be.download(host, src, n * 8);
  } else {
    std::vector<float> f(n);
    be.download(f.data(), src, n * 4);
    for (size_t i = 0; i < n; ++i) host[i] = f[i];
  }
}

}  // namespace flashkit::train
