// The CUDA training backend: a thin wrapper over the training kernels (src/train/cuda/kernels.hpp), cuBLAS (through
// their matmul_bf16) and flashkit::attention_forward / attention_backward on CUDA tensors. Activations are bf16;
// master weights, gradients and Adam moments are the f32 arenas. Weights are read through a bf16 copy of the
// parameter arena (same offsets) that adamw_step writes as it updates the masters; params_updated() refreshes it
// after a load. Everything runs on one stream; only the reductions the trainer reads (norm, finiteness, losses)
// synchronize. Compiled in CUDA builds when src/train/cuda exists (src/train/CMakeLists.txt).
#include "core/cuda_device.hpp"
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/cuda_check.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "train/backend.hpp"
#include "train/cuda/kernels.hpp"

namespace flashkit::train {
namespace {

namespace k = flashkit::train::cuda;
using k::bf16;

[[noreturn]] void internal(const std::string& m) { fail(Status::internal, "train cuda backend: " + m); }

class CudaTrainBackend final : public Backend {
 public:
  explicit CudaTrainBackend(int device) : dev_(device) {
    name_ = cuda_use_device(dev_);
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) fail(Status::device_error, "cublasCreate failed");
    check_cuda(cudaMallocHost(&host_f32_, 16), "cudaMallocHost");
    reduce_scratch_ = device_f32(k::reduce_scratch_floats() + 16);
  }
  ~CudaTrainBackend() override {
    cudaSetDevice(dev_);
    if (stream_) cudaStreamSynchronize(stream_);
    for (void* p : owned_) cudaFree(p);
    for (void* p : internal_) cudaFree(p);
    if (host_f32_) cudaFreeHost(host_f32_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda; }
  std::string name() const override { return name_; }
  DType param_dtype() const override { return DType::f32; }
  DType act_dtype() const override { return DType::bf16; }

  Mat alloc(DType dtype, int64_t rows, int64_t cols) override {
    const size_t bytes = size_t(std::max<int64_t>(1, rows * cols)) * size_t(dtype_size(dtype));
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)");
    check_cuda(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync");
    owned_.insert(p);
    return Mat{p, dtype, rows, cols, cols};
  }
  void free(Mat& m) override {
    if (!m.data) return;
    if (!owned_.erase(m.data)) internal("free of a buffer this backend does not own");
    cudaStreamSynchronize(stream_);
    for (auto it = shadows_.begin(); it != shadows_.end();)
      if (it->master == m.data) {
        cudaFree(it->copy);
        internal_.erase(it->copy);
        it = shadows_.erase(it);
      } else {
        ++it;
      }
    cudaFree(m.data);
    m = Mat{};
  }
  void upload(const Mat& dst, const void* host, size_t bytes) override {
    check_cuda(cudaMemcpyAsync(dst.data, host, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    check_cuda(cudaStreamSynchronize(stream_), "upload (synchronize)");  // the host buffer may go away
  }
  void download(void* host, const Mat& src, size_t bytes) override {
    check_cuda(cudaMemcpyAsync(host, src.data, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    check_cuda(cudaStreamSynchronize(stream_), "download (synchronize)");
  }
  void zero(const Mat& m) override {
    check_cuda(cudaMemsetAsync(m.data, 0, size_t(m.numel() * dtype_size(m.dtype)), stream_), "zero");
  }
  void copy(const Mat& dst, const Mat& src) override {
    const size_t es = size_t(dtype_size(src.dtype));
    check_cuda(cudaMemcpy2DAsync(dst.data, size_t(dst.ld) * es, src.data, size_t(src.ld) * es, size_t(src.cols) * es,
                                 size_t(src.rows), cudaMemcpyDeviceToDevice, stream_),
               "copy");
  }
  void synchronize() override { check_cuda(cudaStreamSynchronize(stream_), "synchronize"); }

  // The master arena `params` gets (or refreshes) its bf16 copy; adamw_step keeps it current by itself.
  void params_updated(const Mat& params) override {
    Shadow* s = find_shadow(params.data);
    if (!s) {
      shadows_.push_back({params.data, params.numel(), nullptr});
      s = &shadows_.back();
      check_cuda(cudaMalloc(reinterpret_cast<void**>(&s->copy), size_t(s->n) * 2), "cudaMalloc(bf16 weights)");
      internal_.insert(s->copy);
    } else if (adamw_wrote_) {
      adamw_wrote_ = false;
      return;
    }
    k::cast_f32_to_bf16(static_cast<const float*>(params.data), s->copy, s->n, stream_);
  }

  void embedding_fwd(const Mat& ids, const Mat& table, const Mat& out, float scale) override {
    contiguous(out, "embedding output");
    k::embedding_fwd(static_cast<const int32_t*>(ids.data), weight(table), bf(out), out.rows, table.rows, table.cols,
                     scale, stream_);
  }
  void embedding_bwd(const Mat& ids, const Mat& dout, const Mat& dtable, float scale) override {
    const size_t ws = k::embedding_bwd_workspace_bytes(dout.rows, dtable.rows);
    k::embedding_bwd(static_cast<const int32_t*>(ids.data), cbf(dout), f32(dtable), dout.rows, dtable.rows,
                     dtable.cols, scale, scratch(embed_ws_, ws), ws, stream_);
  }
  void rmsnorm_fwd(const Mat& x, const Mat& w, const Mat& out, const Mat& rstd, int64_t group, float eps,
                   bool plus_one) override {
    k::rmsnorm_fwd(cbf(x), x.ld, cf32(w), bf(out), out.ld, f32(rstd), x.rows, x.cols / group, group, eps, plus_one,
                   stream_);
  }
  void rmsnorm_bwd(const Mat& dout, const Mat& x, const Mat& w, const Mat& rstd, const Mat& dx, const Mat& dw,
                   int64_t group, bool plus_one, bool accumulate) override {
    const int64_t groups = x.cols / group;
    const size_t need = size_t(k::rmsnorm_bwd_scratch_floats(x.rows, groups, group)) * 4;
    k::rmsnorm_bwd(cbf(dout), dout.ld, cbf(x), x.ld, cf32(w), cf32(rstd), bf(dx), dx.ld, accumulate, f32(dw),
                   static_cast<float*>(scratch(norm_ws_, need)), x.rows, groups, group, plus_one, stream_);
  }
  void matmul(const Mat& A, bool transA, const Mat& B, bool transB, const Mat& C, float alpha, float beta) override {
    const int64_t M = transA ? A.cols : A.rows, K = transA ? A.rows : A.cols, N = transB ? B.rows : B.cols;
    if (C.dtype != DType::f32 && C.dtype != DType::bf16) internal("matmul output dtype");
    k::matmul_bf16(blas_, operand(A, 0), A.ld, transA, operand(B, 1), B.ld, transB, C.data, C.ld,
                   C.dtype == DType::f32, M, N, K, alpha, beta, stream_);
  }
  void rope_fwd(const Mat& x, int64_t seq, int64_t heads, int64_t hd, const Mat& cos, const Mat& sin) override {
    k::rope_fwd_table(cbf(x), x.ld, bf(x), x.ld, nullptr, seq, cbf(cos), cbf(sin), cos.rows, x.rows, heads, hd, stream_);
  }
  void rope_bwd(const Mat& dx, int64_t seq, int64_t heads, int64_t hd, const Mat& cos, const Mat& sin) override {
    k::rope_bwd_table(cbf(dx), dx.ld, bf(dx), dx.ld, nullptr, seq, cbf(cos), cbf(sin), cos.rows, dx.rows, heads, hd,
                      stream_);
  }
  void attention_fwd(const Mat& q, const Mat& kk, const Mat& v, const Mat& o, const Mat& lse,
                     const AttnShape& s) override {
    StreamScope scope(stream_);
    attention_forward(view(q, s, s.heads), view(kk, s, s.kv_heads), view(v, s, s.kv_heads), view(o, s, s.heads),
                      lse_view(lse, s), options(s));
  }
  void attention_bwd(const Mat& dout, const Mat& q, const Mat& kk, const Mat& v, const Mat& o, const Mat& lse,
                     const Mat& dq, const Mat& dk, const Mat& dv, const AttnShape& s) override {
    StreamScope scope(stream_);
    attention_backward(view(dout, s, s.heads), view(q, s, s.heads), view(kk, s, s.kv_heads), view(v, s, s.kv_heads),
                       view(o, s, s.heads), lse_view(lse, s), view(dq, s, s.heads), view(dk, s, s.kv_heads),
                       view(dv, s, s.kv_heads), options(s));
  }
  void gated_act_fwd(const Mat& gu, const Mat& out, Act act) override {
    contiguous(gu, "gate|up"), contiguous(out, "gated output");
    k::gated_act_fwd(cbf(gu), bf(out), out.rows, out.cols, act == Act::silu ? k::Act::silu : k::Act::gelu_tanh, stream_);
  }
  void gated_act_bwd(const Mat& dout, const Mat& gu, const Mat& dgu, Act act) override {
    contiguous(dout, "gated gradient"), contiguous(gu, "gate|up"), contiguous(dgu, "gate|up gradient");
    k::gated_act_bwd(cbf(dout), cbf(gu), bf(dgu), dout.rows, dout.cols,
                     act == Act::silu ? k::Act::silu : k::Act::gelu_tanh, stream_);
  }
  void add_inplace(const Mat& y, const Mat& x) override {
    contiguous(y, "add target"), contiguous(x, "add source");
    if (y.dtype == DType::bf16) k::add_inplace(bf(y), cbf(x), y.numel(), stream_);
    else if (x.dtype == DType::f32) k::add_inplace(f32(y), cf32(x), y.numel(), stream_);
    else k::add_inplace(f32(y), cbf(x), y.numel(), stream_);
  }
  void cross_entropy_chunk(const Mat& logits, const Mat& targets, const Mat& losses, float softcap,
                           float grad_scale) override {
    // The bf16 copy of the gradient feeds the two GEMMs that follow (matmul() recognises the logits pointer).
    bf16* copy = static_cast<bf16*>(scratch(ce_bf16_, size_t(logits.rows * logits.ld) * 2));
    k::cross_entropy_chunk_fwd_bwd(f32(logits), logits.ld, static_cast<const int32_t*>(targets.data), f32(losses),
                                   copy, logits.rows, logits.cols, grad_scale, softcap, stream_);
    ce_logits_ = logits.data;
  }
  double global_norm_sq(const Mat& g) override {
    k::global_norm_sq(cf32(g), g.numel(), reduce_scratch_, false, reduce_scratch_ + 8, stream_);
    return double(read_f32(reduce_scratch_));
  }
  void adamw_step(const Mat& params, const Mat& grads, const Mat& m, const Mat& v, const AdamW& h) override {
    bf16* copy = nullptr;
    for (const Shadow& s : shadows_) {
      const char* base = static_cast<const char*>(s.master);
      const char* p = static_cast<const char*>(params.data);
      if (p >= base && p < base + s.n * 4) copy = s.copy + (p - base) / 4;
    }
    k::adamw_step(f32(params), cf32(grads), f32(m), f32(v), copy, params.numel(), h.lr, h.beta1, h.beta2, h.eps,
                  h.weight_decay, h.step, h.grad_scale, stream_);
    adamw_wrote_ = copy != nullptr;
  }
  void scale_inplace(const Mat& x, float s) override { k::scale_inplace(f32(x), x.numel(), s, stream_); }
  bool all_finite(const Mat& x) override {
    contiguous(x, "finiteness check");
    k::count_nonfinite(cf32(x), x.numel(), reduce_scratch_, false, reduce_scratch_ + 8, stream_);
    return read_f32(reduce_scratch_) == 0.f;
  }

 private:
  struct Shadow {
    const void* master;
    int64_t n;
    bf16* copy;
  };
  // flashkit launches on the thread's stream: this one for the scope of a call.
  struct StreamScope {
    void* prev;
    explicit StreamScope(cudaStream_t s) : prev(flashkit::cuda_stream()) { flashkit::set_cuda_stream(s); }
    ~StreamScope() { flashkit::set_cuda_stream(prev); }
  };
  struct Buf {
    void* p = nullptr;
    size_t bytes = 0;
  };

  static bf16* bf(const Mat& m) { return static_cast<bf16*>(m.data); }
  static const bf16* cbf(const Mat& m) { return static_cast<const bf16*>(m.data); }
  static float* f32(const Mat& m) { return static_cast<float*>(m.data); }
  static const float* cf32(const Mat& m) { return static_cast<const float*>(m.data); }
  static void contiguous(const Mat& m, const char* what) {
    if (m.ld != m.cols) internal(std::string(what) + " must be contiguous");
  }
  Shadow* find_shadow(const void* p) {
    for (Shadow& s : shadows_) {
      const char* base = static_cast<const char*>(s.master);
      if (static_cast<const char*>(p) >= base && static_cast<const char*>(p) < base + s.n * 4) return &s;
    }
    return nullptr;
  }
  // A weight of the master arena, as its bf16 copy.
  const bf16* weight(const Mat& w) {
    if (w.dtype == DType::bf16) return cbf(w);
    Shadow* s = find_shadow(w.data);
    if (!s) internal("an f32 weight outside the registered parameter arena (params_updated() not called?)");
    return s->copy + (static_cast<const char*>(w.data) - static_cast<const char*>(s->master)) / 4;
  }
  // A GEMM operand as bf16: activations as they are, weights through the copy, the loss chunk's gradient through
  // the copy cross_entropy_chunk wrote, any other f32 buffer converted into scratch.
  const bf16* operand(const Mat& m, int which) {
    if (m.dtype == DType::bf16) return cbf(m);
    if (find_shadow(m.data)) return weight(m);
    if (m.data == ce_logits_) return static_cast<const bf16*>(ce_bf16_.p);
    contiguous(m, "f32 GEMM operand");
    Buf& b = which == 0 ? conv_a_ : conv_b_;
    bf16* dst = static_cast<bf16*>(scratch(b, size_t(m.numel()) * 2));
    k::cast_f32_to_bf16(cf32(m), dst, m.numel(), stream_);
    return dst;
  }
  void* scratch(Buf& b, size_t bytes) {
    if (b.bytes < bytes) {
      if (b.p) {
        cudaStreamSynchronize(stream_);
        cudaFree(b.p);
        internal_.erase(b.p);
      }
      check_cuda(cudaMalloc(&b.p, bytes), "cudaMalloc(scratch)");
      internal_.insert(b.p);
      b.bytes = bytes;
    }
    return b.p;
  }
  float* device_f32(int64_t n) {
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, size_t(n) * 4), "cudaMalloc");
    internal_.insert(p);
    return static_cast<float*>(p);
  }
  float read_f32(const float* dev) {
    check_cuda(cudaMemcpyAsync(host_f32_, dev, 4, cudaMemcpyDeviceToHost, stream_), "download (reduction)");
    check_cuda(cudaStreamSynchronize(stream_), "synchronize (reduction)");
    return *host_f32_;
  }
  TensorView view(const Mat& m, const AttnShape& s, int64_t heads) const {
    TensorView t;
    t.data = m.data;
    t.dtype = m.dtype;
    t.device = Device::cuda;
    t.device_index = dev_;
    t.ndim = 4;
    t.shape = {s.batch, s.seq, heads, s.head_dim};
    t.strides = {s.seq * m.ld, m.ld, s.head_dim, 1};
    return t;
  }
  TensorView lse_view(const Mat& lse, const AttnShape& s) const {
    TensorView t = TensorView::contiguous(lse.data, DType::f32, {s.batch, s.heads, s.seq}, Device::cuda);
    t.device_index = dev_;
    return t;
  }
  static AttentionOptions options(const AttnShape& s) {
    AttentionOptions o;
    o.scale = s.scale;
    o.causal = true;
    o.window_left = s.window > 0 ? s.window - 1 : -1;
    o.softcap = s.softcap;
    o.check_finite = false;
    return o;
  }

  int dev_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::unordered_set<void*> owned_, internal_;
  std::vector<Shadow> shadows_;
  bool adamw_wrote_ = false;
  Buf embed_ws_, norm_ws_, ce_bf16_, conv_a_, conv_b_;
  const void* ce_logits_ = nullptr;
  float* reduce_scratch_ = nullptr;
  float* host_f32_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  return std::make_unique<CudaTrainBackend>(device_index);
}

}  // namespace flashkit::train
