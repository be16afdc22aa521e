// The CUDA engine backend (the contract is src/engine/backend.hpp).
//
//   * Weights: bf16 on the device (f32 / f16 checkpoints are converted once at load); norm vectors f32. With
//     BackendOptions::keep_quantized, GGUF block-quantized matrices (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) are uploaded as
//     their blocks instead (0.56 .. 1.06 bytes per weight; Matrix::w.dtype == DType::i32 marks them, one segment
//     per fused part in Matrix::impl) and computed as they are: T <= 8 rows -> the dequantize-in-kernel GEMV
//     (gemv_quant.cu); more rows -> row panels dequantized into one bf16 scratch buffer (sized at load, at most
//     kDequantScratchElems values, counted in stats().dequant_scratch_bytes) and cuBLAS. Fusion at flush
//     (fused_quant): [rms_norm] quantized linear [add | gated_act] -> one quantized GEMV (norm prologue; residual add
//     or, for one row, gated activation epilogue). Embedding rows of a quantized table have their own gather kernel.
//   * Activations: the residual stream is f32 (as on the CPU backend). For bf16 weights (the requested storage),
//     activation_dtype() and kv_dtype() are bf16: multi-row steps keep their intermediates (qkv, attention output,
//     gate|up, ...) in bf16, as transformers does, which halves a long prefill's element-wise traffic and feeds
//     cuBLAS and flash attention without conversions; the KV cache is bf16 (half the bytes decode attention reads).
//     f32 checkpoints keep f32 activations and an f32 cache. Every op takes f32 or bf16 operands.
//   * Linear: T <= 8 rows -> the bandwidth-bound GEMV (gemv.cu); more rows -> cuBLAS (bf16 x bf16 -> f32 or bf16).
//   * Decode-exact steps (speculative verification, set_step_shape): linear on the GEMV for any T, attention one
//     decode-kernel launch per row (position *pos0 + row on the device): rows bitwise equal to decode steps, graph-safe.
//   * Attention: T == 1 -> the decode family's fused-prologue kernel (engine/cuda/attention_decode.cpp), graph-safe; T > 1 -> flashkit's flash
//     attention (flashkit::attention_forward on CUDA tensors) over the cache, or over a gathered copy for rings.
//   * argmax (greedy decoding): one kernel (argmax.cu) at the end of the step; argmax_result() downloads 8 bytes.
//   * Batched paged steps (serving): set_paged_step uploads the step's tables in one copy (engine/cuda/paged.cpp);
//     rope reads per-row positions, paged_attention stores the k/v rows into their slots and runs the decode
//     family's paged kernel over every row of the step in one launch. Every per-step value is read on the device,
//     so the model captures a paged step per (rows, logit rows, greedy) shape like a decode step.
//
// Deferred execution and fusion. Ops are queued, not launched, and the queue is run ("flushed") at the points
// where the host can observe device memory or the step inputs change: download*, upload, zero, free,
// synchronize, set_step, graph_begin / graph_end / graph_replay and destruction. At flush, consecutive ops that
// match a fusion pattern run as one kernel:
//   [add | add_rms_norm] [rms_norm over the row] linear [gated_act | softcap]   -> one GEMV (prologue / epilogue)
//   [rms_norm(q) rms_norm(k) rope(q) rope(k)] attention (T == 1)               -> one decode-attention kernel
//   [add | add_rms_norm] [rms_norm] linear(in_proj) ssm_conv (T == 1)         -> one GEMV with the conv epilogue
//   linear(x_proj) linear(dt_proj) ssm_scan (T == 1)                           -> one Mamba mixer-step kernel
// (the Mamba patterns: engine/mamba_fusion.hpp, which also says when they apply)
// Fused kernels write every buffer the unfused ops would (the residual, the normed row, the gate/up values), except
// that a fused decode attention leaves q and k un-normalized and un-rotated in their buffers (the new key is in the
// cache). Tuning::cuda_fuse = false (FLASHKIT_CUDA_FUSE=0) disables fusion, cuda_graphs = false CUDA graphs (A/B).
//
// CUDA graphs: graph_begin only marks the start; graph_end captures the queued ops (all are graph-safe at T == 1:
// per-step values are read from the step buffer), instantiates, launches and keeps the executable under the key.
// A step that is not graph-safe (attention with T > 1 outside decode-exact steps) runs eagerly and the key is
// remembered as not capturable.
#include "core/cuda_device.hpp"
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dist/comm.hpp"
#include "engine/backend.hpp"
#include "core/cuda_check.hpp"
#include "engine/cuda/gemv_quant.hpp"
#include "engine/cuda/kernels.hpp"
#include "engine/cuda/offload.hpp"
#include "engine/cuda/paged.hpp"
#include "engine/mamba_fusion.hpp"
#include "kernels/cuda/ssm/ssm_cuda.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "model/quant.hpp"
#include "model/weights.hpp"

namespace flashkit::engine {

namespace {

namespace kc = flashkit::engine::cuda;

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cuda_fail(e, std::string("cuda backend: ") + what);
}
void ckb(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(Status::device_error, std::string("cuda backend: ") + what + ": cuBLAS status " + std::to_string(int(s)));
}
bool bf(const Tensor& t) { return t.dtype == DType::bf16; }
bool same(const Tensor& a, const Tensor& b) { return a.data == b.data && a.ld == b.ld && a.dtype == b.dtype; }

enum class OpKind { embed, rms_norm, add_rms_norm, linear, rope, attention, gated_act, add, softcap, argmax, ssm_conv,
                    ssm_scan, paged_attention, gather_rows, argmax_rows };

// One queued op. Operand slots: see the enqueue functions.
struct Op {
  OpKind kind = OpKind::add;
  Tensor a, b, c, d;
  Tensor ssm[5];  // Mamba ops' further operands (B, C, A, D, state / conv state); never the residual stream
  Matrix M;
  KVLayer kv;
  PagedKVLayer pkv;
  bool paged = false;  // queued during a batched paged step: embed / rope read the paged step buffer
  bool exact = false;  // queued during a decode-exact step (set_step_shape): rows as one-row decode steps compute them
  int64_t layer = -1;  // set_layer() when queued (weight offload orders the slot copies by it)
  AttentionParams ap;
  int64_t T = 0, group = 0, heads = 0, head_dim = 0;
  float f = 0;  // scale / eps / attn_scaling / cap
  Activation act = Activation::silu;
};

kc::Act to_act(Activation a) { return a == Activation::silu ? kc::Act::silu : kc::Act::gelu_tanh; }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& o)
      : dev_(o.device_index), bf16_acts_(o.weight_dtype == DType::bf16), keep_quant_(o.keep_quantized),
        tuning_(o.tuning) {
    name_ = cuda_use_device(dev_);
    ck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ck(cudaEventCreateWithFlags(&step_evt_, cudaEventDisableTiming), "cudaEventCreate");
    ckb(cublasCreate(&blas_), "cublasCreate");
    ckb(cublasSetStream(blas_, stream_), "cublasSetStream");
    ck(cudaMalloc(&blas_ws_, kBlasWs), "cudaMalloc(cuBLAS workspace)");
    ckb(cublasSetWorkspace(blas_, blas_ws_, kBlasWs), "cublasSetWorkspace");
    ck(cudaMalloc(&counters_, kCounters * sizeof(unsigned)), "cudaMalloc(counters)");
    ck(cudaMemset(counters_, 0, kCounters * sizeof(unsigned)), "cudaMemset(counters)");
    ck(cudaMalloc(&argmax_dev_, 4 * sizeof(int32_t)), "cudaMalloc(argmax result)");
    ck(cudaMemset(argmax_dev_, 0, 4 * sizeof(int32_t)), "cudaMemset(argmax result)");
    ck(cudaMallocHost(&argmax_host_, 2 * sizeof(int32_t)), "cudaMallocHost(argmax result)");
    graphs_on_ = tuning_.cuda_graphs;
    fuse_ = tuning_.cuda_fuse;
    pingpong_ = tuning_.cuda_pingpong;
    ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the memsets above ran on the legacy stream
  }

  ~CudaBackend() override {
    try {
      flush();
    } catch (...) {
    }
    cudaSetDevice(dev_);
    if (stream_) cudaStreamSynchronize(stream_);
    drop_graphs();
    for (void* p : owned_) cudaFree(p);
    for (Scratch* s : {&part_, &bfx_, &q16_, &o16_, &lse_, &kt_, &vt_, &f32tmp_, &argpart_, &hshadow_, &ppart_, &argrows_,
                       &deq_, &xq_, &yq_})
      if (s->p) cudaFree(s->p);
    if (d_step_) cudaFree(d_step_);
    if (h_step_) cudaFreeHost(h_step_);
    if (pinned_) cudaFreeHost(pinned_);
    if (counters_) cudaFree(counters_);
    if (argmax_dev_) cudaFree(argmax_dev_);
    if (argmax_host_) cudaFreeHost(argmax_host_);
    if (blas_) cublasDestroy(blas_);
    if (blas_ws_) cudaFree(blas_ws_);
    if (step_evt_) cudaEventDestroy(step_evt_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda; }
  std::string name() const override { return name_; }
  DType activation_dtype() const override { return bf16_acts_ ? DType::bf16 : DType::f32; }
  DType kv_dtype() const override { return bf16_acts_ ? DType::bf16 : DType::f32; }

  // ---------------------------------------------------------------- memory
  Tensor alloc(DType dtype, int64_t rows, int64_t cols) override {
    if (rows < 0 || cols < 0) fail(Status::invalid_argument, "cuda backend alloc: negative shape");
    const size_t bytes = std::max<size_t>(size_t(rows) * size_t(cols) * size_t(dtype_size(dtype)), 16);
    void* p = nullptr;
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) cuda_fail(e, "cuda backend: cudaMalloc(" + std::to_string(bytes) + " bytes)");
    owned_.insert(p);
    return Tensor{p, dtype, rows, cols, cols};
  }
  void free(Tensor& t) override {
    if (!t.data) return;
    flush();
    release(t.data);
    t = Tensor{};
  }
  void upload(const Tensor& dst, const void* host, size_t bytes) override {
    flush();
    if (bytes == 0) return;
    ck(cudaMemcpyAsync(dst.data, host, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    ck(cudaStreamSynchronize(stream_), "upload (synchronize)");
  }
  void download(void* host, const Tensor& src, size_t bytes) override {
    flush();
    if (bytes == 0) return;
    ck(cudaMemcpyAsync(host, src.data, bytes, cudaMemcpyDeviceToHost, stream_), "download");
    ck(cudaStreamSynchronize(stream_), "download (synchronize)");
  }
  void download_f32(float* host, const Tensor& src, int64_t rows) override {
    flush();
    if (rows <= 0 || src.cols <= 0) {
      ck(cudaStreamSynchronize(stream_), "synchronize");
      return;
    }
    const float* from = static_cast<const float*>(src.data);
    int64_t ld = src.ld;
    if (src.dtype != DType::f32) {
      ensure(f32tmp_, size_t(rows * src.cols) * 4);
      kc::convert_rows(src.data, bf(src), src.ld, f32tmp_.p, false, src.cols, rows, src.cols, stream_);
      from = static_cast<const float*>(f32tmp_.p);
      ld = src.cols;
    }
    // Through a pinned staging buffer: a DMA at full PCIe speed plus one host memcpy beats the driver's pageable
    // path for the per-step logits row.
    const size_t row_bytes = size_t(src.cols) * 4, bytes = row_bytes * size_t(rows);
    if (bytes > pinned_bytes_) {
      if (pinned_) cudaFreeHost(pinned_);
      pinned_ = nullptr, pinned_bytes_ = 0;
      ck(cudaMallocHost(&pinned_, bytes), "cudaMallocHost(download staging)");
      pinned_bytes_ = bytes;
    }
    ck(cudaMemcpy2DAsync(pinned_, row_bytes, from, size_t(ld) * 4, row_bytes, size_t(rows), cudaMemcpyDeviceToHost,
                         stream_),
       "download_f32");
    ck(cudaStreamSynchronize(stream_), "download_f32 (synchronize)");
    std::memcpy(host, pinned_, bytes);
  }
  void zero(const Tensor& t) override {
    flush();
    if (!t.data || t.rows <= 0 || t.cols <= 0) return;
    const size_t es = size_t(dtype_size(t.dtype));
    if (t.ld == t.cols) ck(cudaMemsetAsync(t.data, 0, size_t(t.rows * t.cols) * es, stream_), "zero");
    else ck(cudaMemset2DAsync(t.data, size_t(t.ld) * es, 0, size_t(t.cols) * es, size_t(t.rows), stream_), "zero");
  }
  void synchronize() override {
    flush();
    ck(cudaStreamSynchronize(stream_), "synchronize");
  }

  // Tensor parallelism over NCCL: the all-reduce is enqueued on this backend's stream behind the queued ops (no host
  // synchronization; the next ops on the stream read its result). Other communicators stage through the host.
  void all_reduce_sum(const Tensor& x, int64_t T, dist::Communicator& comm) override {
    if (std::strcmp(comm.kind(), "nccl") != 0) return Backend::all_reduce_sum(x, T, comm);
    flush();
    if (x.ld == x.cols) return comm.all_reduce_sum(x.data, size_t(T * x.cols), x.dtype, stream_);
    for (int64_t t = 0; t < T; ++t) comm.all_reduce_sum(x.row_slice(t, 1).data, size_t(x.cols), x.dtype, stream_);
  }

  // ---------------------------------------------------------------- weights
  Matrix load_matrix(std::span<const model::WeightView* const> parts,
                     std::span<const model::WeightView* const> bias_parts) override {
    if (parts.empty()) fail(Status::invalid_argument, "load_matrix: no parts");
    const int64_t cols = parts[0]->shape.size() == 2 ? parts[0]->shape[1] : -1;
    int64_t rows = 0;
    for (const auto* w : parts) {
      if (w->shape.size() != 2 || w->shape[1] != cols)
        fail(Status::invalid_argument, "load_matrix: " + w->name + " is not [out, " + std::to_string(cols) + "]");
      rows += w->shape[0];
    }
    if (!bias_parts.empty() && bias_parts.size() != parts.size())
      fail(Status::invalid_argument, "load_matrix: one bias per part expected");
    flush();
    Matrix m;
    m.rows = rows, m.cols = cols;
    bool keep = keep_quant_;
    for (const auto* w : parts)
      keep = keep && model::is_quantized(w->type) && cols % model::quant_block(w->type).values == 0;
    void* pinned = nullptr;  // an offloaded layer's matrix: written to pinned host memory, read from its slot
    if (keep) {
      load_quantized(parts, m);
    } else if (offload_ && offload_->offloaded(layer_)) {
      const auto pl = offload_->place(layer_, size_t(rows) * size_t(cols) * 2);
      m.w = Tensor{pl.device, DType::bf16, rows, cols, cols};
      pinned = pl.host;
    } else {
      m.w = alloc(DType::bf16, rows, cols);
      weight_bytes_ += uint64_t(rows) * uint64_t(cols) * 2;
    }
    std::vector<uint16_t> host;
    int64_t r0 = 0;
    for (const auto* w : keep ? std::span<const model::WeightView* const>{} : parts) {
      const size_t n = size_t(w->numel());
      const void* src = w->data;
      if (w->type != model::WeightType::bf16) {
        host.resize(n);
        model::to_bf16(*w, host.data());
        src = host.data();
      }
      if (pinned) std::memcpy(static_cast<uint16_t*>(pinned) + r0 * cols, src, n * 2);
      else h2d(static_cast<uint16_t*>(m.w.data) + r0 * cols, src, n * 2, "load_matrix (copy)");
      r0 += w->shape[0];
    }
    if (!bias_parts.empty()) {
      std::vector<float> b;
      b.reserve(size_t(rows));
      for (const auto* w : bias_parts) {
        std::vector<float> t(size_t(w->numel()));
        model::to_f32(*w, t.data());
        b.insert(b.end(), t.begin(), t.end());
      }
      if (int64_t(b.size()) != rows) fail(Status::invalid_argument, "load_matrix: bias sizes do not match the rows");
      m.bias = upload_f32(b);
      weight_bytes_ += uint64_t(rows) * 4;
    }
    return m;
  }
  Tensor load_vector(const model::WeightView& w, float offset) override {
    std::vector<float> v(size_t(w.numel()));
    model::to_f32(w, v.data());
    for (float& x : v) x += offset;
    weight_bytes_ += uint64_t(v.size()) * 4;
    return upload_f32(v);
  }
  Tensor upload_f32(std::span<const float> values) override {
    Tensor t = alloc(DType::f32, 1, int64_t(values.size()));
    flush();
    if (!values.empty()) h2d(t.data, values.data(), values.size() * 4, "upload_f32");
    return t;
  }
  void free_matrix(Matrix& m) override {
    flush();
    if (m.w.data && !owned_.count(m.w.data)) m.w.data = nullptr;  // in an offload slot (freed with the slots)
    if (m.w.data) weight_bytes_ -= std::min<uint64_t>(weight_bytes_, matrix_bytes(m));
    if (m.bias.data) weight_bytes_ -= std::min<uint64_t>(weight_bytes_, uint64_t(m.rows) * 4);
    if (m.w.data) release(m.w.data);
    if (m.bias.data) release(m.bias.data);
    m = Matrix{};
  }

  // ---------------------------------------------------------------- step inputs and graphs
  void reserve_step(int64_t max_rows) override {
    if (max_rows <= step_rows_) return;
    flush();
    ck(cudaStreamSynchronize(stream_), "synchronize");
    drop_graphs();  // they point at the old step buffer
    if (d_step_) cudaFree(d_step_);
    if (h_step_) cudaFreeHost(h_step_);
    d_step_ = nullptr, h_step_ = nullptr;
    ck(cudaMalloc(&d_step_, size_t(max_rows + 1) * 4), "cudaMalloc(step buffer)");
    ck(cudaMallocHost(&h_step_, size_t(max_rows + 1) * 4), "cudaMallocHost(step buffer)");
    ck(cudaMemsetAsync(d_step_, 0, size_t(max_rows + 1) * 4, stream_), "cudaMemset(step buffer)");
    ck(cudaStreamSynchronize(stream_), "synchronize");
    step_rows_ = max_rows;
  }
  void set_step(std::span<const int32_t> tokens, int64_t pos0) override {
    flush();
    const int64_t T = int64_t(tokens.size());
    if (T > step_rows_)
      fail(Status::invalid_argument, "set_step: " + std::to_string(T) + " rows but reserve_step reserved " +
                                         std::to_string(step_rows_));
    if (pos0 < 0 || pos0 + T > INT32_MAX) fail(Status::invalid_argument, "set_step: position out of range");
    ck(cudaEventSynchronize(step_evt_), "set_step (previous upload)");
    h_step_[0] = int32_t(pos0);
    if (T) std::memcpy(h_step_ + 1, tokens.data(), size_t(T) * 4);
    ck(cudaMemcpyAsync(d_step_, h_step_, size_t(T + 1) * 4, cudaMemcpyHostToDevice, stream_), "set_step");
    ck(cudaEventRecord(step_evt_, stream_), "set_step (event)");
    host_pos0_ = pos0;
    paged_ = false;
    exact_ = false;
  }
  // Decode-exact verification steps (docs/speculative.md): attention one launch of the decode kernel per row (the
  // query's position read on the device, so the step is graph-safe), linear on the GEMV for any row count (its
  // per-row accumulation order does not depend on the row count). Trees: unsupported (the base class refuses them).
  void set_step_shape(const StepShape& shape) override {
    Backend::set_step_shape(shape);
    exact_ = shape.decode_exact;
  }
  // ---------------------------------------------------------------- batched paged steps (engine/cuda/paged.hpp)
  bool supports_paged() const override { return true; }
  void set_paged_step(const PagedStep& st) override {
    flush();
    const int64_t T = int64_t(st.tokens.size());
    if (T > step_rows_)
      fail(Status::invalid_argument, "set_paged_step: " + std::to_string(T) + " rows but reserve_step reserved " +
                                         std::to_string(step_rows_));
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    if (pstep_.set(st, stream_)) drop_graphs();  // a new device buffer: captured paged steps point at the old one
    pspans_ = plan_paged_spans(st.positions, st.row_seq,
                               tuning_.paged_flash_chunks ? kCudaPagedChunkMinRows : std::numeric_limits<int64_t>::max());
    pchunks_ = std::any_of(pspans_.begin(), pspans_.end(), [](const PagedSpan& sp) { return sp.chunk; });
    paged_ = true;
    exact_ = false;
  }
  void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKVLayer& cache, const Tensor& out,
                       int64_t T, const AttentionParams& p) override {
    Op o;
    o.kind = OpKind::paged_attention;
    o.a = q, o.b = k, o.c = v, o.d = out, o.pkv = cache, o.T = T, o.ap = p;
    push(std::move(o));
  }
  void gather_rows(const Tensor& x, const Tensor& out, int64_t n) override {
    Op o;
    o.kind = OpKind::gather_rows;
    o.a = x, o.c = out, o.T = n;
    push(std::move(o));
  }
  bool supports_argmax_rows() const override { return true; }
  void argmax_rows(const Tensor& logits, int64_t n) override {
    if (logits.dtype != DType::f32) fail(Status::invalid_argument, "cuda argmax_rows: logits must be f32");
    Op o;
    o.kind = OpKind::argmax_rows;
    o.a = logits, o.T = n;
    push(std::move(o));
  }
  void argmax_rows_result(std::span<ArgmaxResult> out) override {
    flush();
    const size_t n = out.size();
    if (n == 0) return;
    if (argrows_.bytes < n * 8) fail(Status::internal, "cuda argmax_rows_result: more rows than argmax_rows computed");
    argrows_host_.resize(2 * n);
    ck(cudaMemcpyAsync(argrows_host_.data(), argrows_.p, n * 8, cudaMemcpyDeviceToHost, stream_), "argmax_rows_result");
    ck(cudaStreamSynchronize(stream_), "argmax_rows_result (synchronize)");
    for (size_t i = 0; i < n; ++i) {
      ArgmaxResult& r = out[i];
      r.valid = (argrows_host_[2 * i + 1] & 1) == 0;
      r.unique = (argrows_host_[2 * i + 1] & 2) == 0;
      r.index = r.valid ? argrows_host_[2 * i] : -1;
    }
  }
  int64_t free_memory_bytes() const override {
    cudaSetDevice(dev_);
    return kc::device_free_bytes();
  }
  bool graph_replay(uint64_t key) override {
    if (!graphs_on_ || chunk_step()) return false;
    auto it = graphs_.find(key);
    if (it == graphs_.end()) return false;
    flush();
    ck(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch");
    ++stats_.graph_replays;
    return true;
  }
  void graph_begin(uint64_t key) override {
    flush();
    capturing_ = true;
    cap_key_ = key;
  }
  void graph_end(uint64_t key) override {
    if (!capturing_ || key != cap_key_) {
      flush();
      capturing_ = false;
      return;
    }
    capturing_ = false;
    std::vector<Op> ops;
    ops.swap(queue_);
    prepare(ops);
    bool safe = graphs_on_ && !no_graph_.count(key);
    for (const Op& op : ops)
      if (op.kind == OpKind::attention && op.T != 1 && !op.exact) safe = false;  // (paged steps read everything per step on the device)
    if (!safe || chunk_step()) {
      // A paged step with prompt chunks launches per chunk (host-side shapes): eager this time, without marking
      // the key, whose decode-only steps of the same shape capture as usual.
      if (graphs_on_ && !chunk_step()) no_graph_.insert(key);
      ++stats_.graph_eager;
      run(ops);
      return;
    }
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    ck(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    cudaGraph_t g = nullptr;
    bool ok = true;
    try {
      run(ops);
    } catch (const Error&) {
      ok = false;  // (run() left no residual redirect behind: nothing it captured ran)
    }
    cudaError_t e = cudaStreamEndCapture(stream_, &g);
    cudaGraphExec_t ex = nullptr;
    if (ok && e == cudaSuccess && g) e = cudaGraphInstantiate(&ex, g, 0);
    if (g) cudaGraphDestroy(g);
    if (!ok || e != cudaSuccess || !ex) {  // fall back to eager execution for this key
      cudaGetLastError();
      if (offload_) offload_->forget(), drop_graphs();  // its slot copies never ran (other graphs assumed they had)
      no_graph_.insert(key);
      ++stats_.graph_eager;
      run(ops);
      return;
    }
    ++stats_.graph_captures;
    auto it = graphs_.find(key);
    if (it != graphs_.end()) cudaGraphExecDestroy(it->second);
    graphs_[key] = ex;
    ck(cudaGraphLaunch(ex, stream_), "cudaGraphLaunch");
  }
  void graph_forget_all() override {
    flush();
    drop_graphs();
  }
  Stats stats() const override {
    Stats s = stats_;
    s.weight_bytes = weight_bytes_;
    s.dequant_scratch_bytes = deq_.bytes;
    if (offload_) {
      s.offloaded_layers = uint64_t(offload_->offloaded_layers());
      s.host_pinned_bytes = offload_->host_bytes();
      s.offload_bytes_copied = offload_->bytes_copied();
    }
    return s;
  }

  // ---------------------------------------------------------------- weight offload (engine/cuda/offload.hpp)
  bool supports_offload() const override { return true; }
  void configure_offload(const OffloadLayout& layout) override {
    if (offload_) fail(Status::internal, "cuda backend: configure_offload called twice");
    flush();
    offload_ = std::make_unique<kc::WeightOffload>(layout, dev_);
    weight_bytes_ += offload_->device_bytes();  // the slots
  }
  void set_layer(int64_t layer) override { layer_ = layer; }

  // ---------------------------------------------------------------- ops (queued)
  void embed(const Matrix& table, const Tensor& out, int64_t T, float scale) override {
    Op o;
    o.kind = OpKind::embed;
    o.M = table, o.a = out, o.T = T, o.f = scale;
    push(std::move(o));
  }
  void rms_norm(const Tensor& x, const Tensor& w, const Tensor& out, int64_t T, int64_t group, float eps) override {
    Op o;
    o.kind = OpKind::rms_norm;
    o.a = x, o.b = w, o.c = out, o.T = T, o.group = group, o.f = eps;
    push(std::move(o));
  }
  void add_rms_norm(const Tensor& x, const Tensor& w, const Tensor& residual, int64_t T, float eps) override {
    Op o;
    o.kind = OpKind::add_rms_norm;
    o.a = x, o.b = w, o.c = residual, o.T = T, o.f = eps;
    push(std::move(o));
  }
  void linear(const Tensor& x, const Matrix& W, const Tensor& out, int64_t T) override {
    Op o;
    o.kind = OpKind::linear;
    o.a = x, o.M = W, o.c = out, o.T = T;
    push(std::move(o));
  }
  void rope(const Tensor& x, int64_t T, int64_t heads, int64_t head_dim, const Tensor& inv_freq,
            float attn_scaling) override {
    Op o;
    o.kind = OpKind::rope;
    o.a = x, o.b = inv_freq, o.T = T, o.heads = heads, o.head_dim = head_dim, o.f = attn_scaling;
    push(std::move(o));
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const KVLayer& cache, const Tensor& out, int64_t T,
                 const AttentionParams& p) override {
    Op o;
    o.kind = OpKind::attention;
    o.a = q, o.b = k, o.c = v, o.d = out, o.kv = cache, o.T = T, o.ap = p;
    push(std::move(o));
  }
  void gated_act(const Tensor& gu, const Tensor& out, int64_t T, Activation act) override {
    Op o;
    o.kind = OpKind::gated_act;
    o.a = gu, o.c = out, o.T = T, o.act = act;
    push(std::move(o));
  }
  void add(const Tensor& x, const Tensor& y, int64_t T) override {
    Op o;
    o.kind = OpKind::add;
    o.a = x, o.c = y, o.T = T;
    push(std::move(o));
  }
  void softcap(const Tensor& x, int64_t T, float cap) override {
    Op o;
    o.kind = OpKind::softcap;
    o.a = x, o.T = T, o.f = cap;
    push(std::move(o));
  }
  // Mamba layers: the library's fused SSM kernels (src/kernels/cuda/ssm) on this backend's stream; f32 operands.
  bool supports_ssm() const override { return true; }
  void causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& conv_state, const Tensor& out,
                     int64_t T) override {
    Op o;
    o.kind = OpKind::ssm_conv;
    o.a = x, o.b = w, o.c = out, o.d = bias, o.ssm[0] = conv_state, o.T = T;
    push(std::move(o));
  }
  void selective_scan(const Tensor& u, const Tensor& delta, const Tensor& B, const Tensor& C, const Tensor& z,
                      const Tensor& A, const Tensor& D, const Tensor& state, const Tensor& y, int64_t T) override {
    Op o;
    o.kind = OpKind::ssm_scan;
    o.a = u, o.b = delta, o.c = y, o.d = z, o.ssm[0] = B, o.ssm[1] = C, o.ssm[2] = A, o.ssm[3] = D, o.ssm[4] = state;
    o.T = T;
    push(std::move(o));
  }
  void argmax(const Tensor& logits) override {
    if (logits.dtype != DType::f32) fail(Status::invalid_argument, "cuda argmax: logits must be f32");
    Op o;
    o.kind = OpKind::argmax;
    o.a = logits, o.T = 1;
    push(std::move(o));
  }
  ArgmaxResult argmax_result() override {
    flush();
    ck(cudaMemcpyAsync(argmax_host_, argmax_dev_ + 1, 2 * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
       "argmax_result");
    ck(cudaStreamSynchronize(stream_), "argmax_result (synchronize)");
    ArgmaxResult r;
    r.valid = (argmax_host_[1] & 1) == 0;
    r.unique = (argmax_host_[1] & 2) == 0;
    r.index = r.valid ? argmax_host_[0] : -1;
    return r;
  }

 private:
  static constexpr size_t kBlasWs = size_t(32) << 20;
  static constexpr size_t kCounters = 16384;  // [0]: GEMV side outputs, [1..]: attention heads
  // Quantized matrices: steps of up to this many rows use the dequantize-in-kernel GEMV (its row limit).
  static constexpr int64_t kQuantGemvRows = 8;
  // The prefill scratch holds at most this many bf16 values (64 MiB): a larger matrix (a 128k-vocab lm_head) is
  // dequantized and multiplied in row panels, so the scratch stays small next to the quantized weights.
  static constexpr int64_t kDequantScratchElems = int64_t(32) << 20;
  static constexpr DType kQuantMarker = DType::i32;

  // A matrix kept as GGUF blocks: one segment per part, in order, each in the matrix's one device buffer.
  struct QuantMatrix {
    struct Segment {
      model::WeightType type;
      int64_t rows;
      const uint8_t* blocks;  // device
      int64_t row_bytes;
    };
    std::vector<Segment> segments;
    uint64_t bytes = 0;  // of the device buffer (segments 16-byte aligned)
  };
  static bool is_quant(const Matrix& m) { return m.w.dtype == kQuantMarker && m.impl; }
  static const QuantMatrix& quant_of(const Matrix& m) { return *static_cast<const QuantMatrix*>(m.impl.get()); }
  static uint64_t matrix_bytes(const Matrix& m) {
    return is_quant(m) ? quant_of(m).bytes : uint64_t(m.rows) * uint64_t(m.cols) * 2;
  }

  // Uploads the parts' blocks as they are into one device buffer and sizes the prefill scratch for the matrix.
  void load_quantized(std::span<const model::WeightView* const> parts, Matrix& m) {
    auto q = std::make_shared<QuantMatrix>();
    size_t total = 0;
    for (const auto* w : parts) {
      const model::QuantBlock qb = model::quant_block(w->type);
      const int64_t row_bytes = m.cols / qb.values * qb.bytes;
      if (size_t(row_bytes) * size_t(w->shape[0]) != w->nbytes)
        fail(Status::invalid_argument, "load_matrix: " + w->name + " holds " + std::to_string(w->nbytes) +
                                           " bytes, expected " + std::to_string(row_bytes * w->shape[0]));
      q->segments.push_back({w->type, w->shape[0], nullptr, row_bytes});
      total = (total + 15) / 16 * 16 + w->nbytes;  // each segment 16-byte aligned (the GEMV's word loads)
    }
    m.w = alloc(kQuantMarker, 1, int64_t((total + 3) / 4));  // a byte buffer; rows/cols set below
    size_t off = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      off = (off + 15) / 16 * 16;
      auto* dst = static_cast<uint8_t*>(m.w.data) + off;
      h2d(dst, parts[i]->data, parts[i]->nbytes, "load_matrix (quantized blocks)");
      q->segments[i].blocks = dst;
      off += parts[i]->nbytes;
    }
    m.w.rows = m.rows, m.w.cols = m.cols, m.w.ld = m.cols;
    q->bytes = total;
    m.impl = q;
    weight_bytes_ += total;
    ensure(deq_, size_t(std::min(m.rows, std::max<int64_t>(1, kDequantScratchElems / m.cols)) * m.cols) * 2);
  }

  // out = x . W^T for a quantized W. T <= kQuantGemvRows: the GEMV per segment (bf16 operands through f32
  // scratch). Else: each segment in row panels that fit the scratch, dequantized to bf16, then cuBLAS into the
  // panel's output columns.
  // Fusions (T <= kQuantGemvRows): add_to (f32 out, no bias): the residual h that the next op adds `out` to;
  // norm: the rms_norm op (f32 x -> f32 out = o.a, over the whole row) that produces this linear's input.
  void linear_quant(const Op& o, const Tensor* add_to = nullptr, const Op* norm = nullptr) {
    const int64_t T = o.T, N = o.M.rows, K = o.M.cols;
    const QuantMatrix& q = quant_of(o.M);
    if (T <= kQuantGemvRows) {
      const float* x = static_cast<const float*>(norm ? norm->a.data : o.a.data);
      int64_t ldx = norm ? norm->a.ld : o.a.ld;
      if (!norm && bf(o.a)) {
        kc::convert_rows(o.a.data, true, o.a.ld, xq_.p, false, K, T, K, stream_);
        x = static_cast<const float*>(xq_.p), ldx = K;
      }
      float* y = bf(o.c) ? static_cast<float*>(yq_.p) : static_cast<float*>(o.c.data);
      const int64_t ldy = bf(o.c) ? N : o.c.ld;
      int64_t r0 = 0;
      for (const auto& seg : q.segments) {
        kc::QuantGemvFusion f;
        if (add_to) f.add_to = static_cast<float*>(add_to->data) + r0, f.ld_add = add_to->ld;
        if (norm) {
          f.norm_w = static_cast<const float*>(norm->b.data), f.eps = norm->f;
          if (r0 == 0) f.norm_out = static_cast<float*>(norm->c.data), f.ld_norm_out = norm->c.ld;  // written once
        }
        kc::gemv_quant(x, ldx, int(T), seg.blocks, seg.type, seg.rows, K, y + r0, ldy, stream_, f);
        r0 += seg.rows;
      }
      if (bf(o.c)) kc::convert_rows(yq_.p, false, N, o.c.data, true, o.c.ld, T, N, stream_);
    } else {
      const void* xb = o.a.data;
      int64_t ldx = o.a.ld;
      if (!bf(o.a)) {
        kc::convert_rows(o.a.data, false, o.a.ld, bfx_.p, true, K, T, K, stream_);
        xb = bfx_.p, ldx = K;
      }
      const int64_t panel = std::max<int64_t>(1, int64_t(deq_.bytes / 2) / K);
      const size_t es = size_t(dtype_size(o.c.dtype));
      const float one = 1.0f, zero = 0.0f;
      int64_t r0 = 0;
      for (const auto& seg : q.segments) {
        for (int64_t r = 0; r < seg.rows; r += panel) {
          const int64_t n = std::min(panel, seg.rows - r);
          kc::dequantize_bf16(seg.blocks + r * seg.row_bytes, seg.type, n, K, static_cast<uint16_t*>(deq_.p), stream_);
          ckb(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(T), int(K), &one, deq_.p, CUDA_R_16BF, int(K),
                           xb, CUDA_R_16BF, int(ldx), &zero, static_cast<char*>(o.c.data) + size_t(r0 + r) * es,
                           bf(o.c) ? CUDA_R_16BF : CUDA_R_32F, int(o.c.ld), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx (dequantized panel)");
        }
        r0 += seg.rows;
      }
    }
    if (o.M.bias.data)
      kc::add_bias(o.c.data, o.c.ld, bf(o.c), static_cast<const float*>(o.M.bias.data), T, N, stream_);
  }

  struct Scratch {
    void* p = nullptr;
    size_t bytes = 0;
  };

  // Host -> device copy of load-time data, complete on return (the source may be pageable or temporary).
  void h2d(void* dst, const void* src, size_t bytes, const char* what) {
    ck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), what);
    ck(cudaStreamSynchronize(stream_), what);
  }

  void push(Op&& o) {
    o.paged = paged_;
    o.exact = exact_;
    o.layer = layer_;
    queue_.push_back(std::move(o));
    // Without a graph capture pending, bound the queue (a long prefill enqueues thousands of ops).
    if (!capturing_ && queue_.size() > 256) flush_prefix();
  }
  // Runs all but the last few ops (they may still fuse with what comes next).
  void flush_prefix() {
    std::vector<Op> head(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end() - 8));
    queue_.erase(queue_.begin(), queue_.end() - 8);
    prepare(head);
    run(head);
  }
  void flush() {
    if (queue_.empty()) return;
    std::vector<Op> ops;
    ops.swap(queue_);
    prepare(ops);
    run(ops);
  }

  void release(void* p) {
    auto it = owned_.find(p);
    if (it == owned_.end()) return;
    ck(cudaStreamSynchronize(stream_), "synchronize (free)");
    cudaFree(p);
    owned_.erase(it);
  }
  void drop_graphs() {
    if (!graphs_.empty() && stream_) cudaStreamSynchronize(stream_);
    for (auto& kv : graphs_) cudaGraphExecDestroy(kv.second);
    graphs_.clear();
    no_graph_.clear();
  }
  // Grow-only scratch. Growing frees memory a captured graph may use, so graphs are dropped (never during capture:
  // prepare() sizes everything before a capture starts).
  void ensure(Scratch& s, size_t bytes) {
    if (bytes <= s.bytes) return;
    drop_graphs();
    ck(cudaStreamSynchronize(stream_), "synchronize (scratch)");
    if (s.p) cudaFree(s.p);
    s.p = nullptr, s.bytes = 0;
    bytes = (bytes + 255) / 256 * 256;
    ck(cudaMalloc(&s.p, bytes), "cudaMalloc(scratch)");
    s.bytes = bytes;
  }

  int64_t max_keys(const Op& o) const {
    const int64_t cap = o.kv.capacity;
    return o.ap.window > 0 ? std::min<int64_t>(o.ap.window, cap) : cap;
  }
  int splits_for(const Op& o) const { return kc::decode_attention_splits(int(o.ap.heads), max_keys(o)); }
  // The paged attention's splits: a function of the row count and the longest sequence the block tables can hold
  // (not of this step's positions), so a captured paged step replays for any positions; each row uses as many of
  // them as its own keys need (paged.hpp).
  // (A decode span of a step with prompt chunks plans for its own rows: such steps are never captured.)
  int paged_splits(const Op& o, int64_t rows) const {
    const int64_t most = pstep_.max_blocks() * o.pkv.block_size;
    return kc::paged_attention_splits(rows, o.ap.heads, o.ap.kv_heads, o.ap.head_dim, most, o.ap.window, tuning_);
  }
  bool gemv_ok(const Op& lin) const {
    const int64_t K = lin.M.cols;
    const int64_t max_rows = lin.exact ? kc::kGemvMaxRowsPerLaunch : 8;  // decode-exact: any T, in launches of <= 16
    return lin.T >= 1 && (lin.T <= 8 || lin.exact) && K % 8 == 0 && lin.M.w.dtype == DType::bf16 &&
           std::min(lin.T, max_rows) * K * 4 <= 200 * 1024 &&
           (lin.a.dtype == DType::f32 || lin.a.dtype == DType::bf16) &&
           (lin.c.dtype == DType::f32 || lin.c.dtype == DType::bf16);
  }

  // Sizes the scratch every op of `ops` needs (before a capture, so nothing is allocated while capturing).
  void prepare(const std::vector<Op>& ops) {
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    for (const Op& o : ops) {
      if (o.kind == OpKind::linear && is_quant(o.M) && o.T <= kQuantGemvRows) {
        if (bf(o.a)) ensure(xq_, size_t(o.T * o.M.cols) * 4);  // the quantized GEMV takes f32 x ...
        if (bf(o.c)) ensure(yq_, size_t(o.T * o.M.rows) * 4);  // ... and writes f32 y
      } else if (o.kind == OpKind::linear) {
        if (!bf(o.a)) ensure(bfx_, size_t(o.T * o.M.cols) * 2);  // cuBLAS takes bf16 x
      } else if ((o.kind == OpKind::add || o.kind == OpKind::add_rms_norm) && (o.T <= 8 || o.exact) && fuse_) {
        ensure(hshadow_, extent_rows(o.c, o.T));  // residual ping-pong target (T <= 8 rows)
      } else if (o.kind == OpKind::argmax) {
        ensure(argpart_, size_t(kc::argmax_part_bytes(o.a.cols)));
      } else if (o.kind == OpKind::argmax_rows) {
        ensure(argrows_, size_t(std::max<int64_t>(o.T, 1)) * 8);
      } else if (o.kind == OpKind::paged_attention) {
        const int64_t H = o.ap.heads, D = o.ap.head_dim, kvd = o.ap.kv_heads * D;
        for (const PagedSpan& sp : pspans_) {
          if (!sp.chunk) {
            const int64_t floats = kc::paged_attention_part_floats(sp.rows, H, D, paged_splits(o, sp.rows));
            if (floats > 0) ensure(ppart_, size_t(floats) * 4);
            continue;
          }
          ensure(kt_, size_t(sp.keys(o.ap.window) * kvd) * 2);
          ensure(vt_, size_t(sp.keys(o.ap.window) * kvd) * 2);
          if (!bf(o.a)) ensure(q16_, size_t(sp.rows * H * D) * 2);
          if (!bf(o.d)) ensure(o16_, size_t(sp.rows * H * D) * 2);
          ensure(lse_, size_t(sp.rows * H) * 4);
        }
      } else if (o.kind == OpKind::attention) {
        const int64_t H = o.ap.heads, D = o.ap.head_dim, kvd = o.ap.kv_heads * D;
        if (o.T == 1 || o.exact) {
          ensure(part_, size_t(kc::decode_attention_part_floats(int(H), int(D), splits_for(o))) * 4);
          if (H + 1 > int64_t(kCounters)) fail(Status::invalid_argument, "cuda attention: too many heads");
        } else {
          if (!bf(o.a)) ensure(q16_, size_t(o.T * H * D) * 2);  // bf16 q and out are used in place
          if (!bf(o.d)) ensure(o16_, size_t(o.T * H * D) * 2);
          ensure(lse_, size_t(o.T * H) * 4);
          if (needs_gather(o.kv, host_pos0_, o.T)) {
            const int64_t nk = gather_old(o, host_pos0_) + o.T;
            ensure(kt_, size_t(nk * kvd) * 2);
            ensure(vt_, size_t(nk * kvd) * 2);
          }
        }
      }
    }
  }

  // ---------------------------------------------------------------- execution with fusion
  //
  // Residual ping-pong. A fused GEMV whose prologue updates the residual h in place (h += norm(delta)) can only
  // write h once every block has read it: the last block to arrive writes it, which keeps the kernel alive ~1.2 us
  // longer (an atomic round trip and a one-block write; bench/cuda/latency_floor.cu). When the next op to touch h
  // is again such an update (the next fused GEMV's prologue), the first kernel writes h to a shadow buffer instead,
  // each block its slice, and the second reads the shadow and writes h back home, also by slices (in the model's
  // decode step h lives in the shadow from a layer's MLP GEMV to the next layer's qkv GEMV). Any other op that
  // touches h while it lives in the shadow first gets a copy back; a copy costs more than the counter it saves, so
  // the look-ahead redirects only when the next update can fuse. KV caches and weights never alias h.
  // stats().residual_redirects / residual_copies count both decisions (made when ops run or are captured).
  static size_t extent_rows(const Tensor& t, int64_t rows) {
    return size_t(((std::max<int64_t>(rows, 1) - 1) * t.ld + t.cols) * int64_t(dtype_size(t.dtype)));
  }
  static size_t extent(const Tensor& t, int64_t T) { return extent_rows(t, std::max(t.rows, T)); }
  static bool overlaps(const Tensor& a, int64_t Ta, const Tensor& b, int64_t Tb) {
    if (!a.data || !b.data) return false;
    const char* a0 = static_cast<const char*>(a.data);
    const char* b0 = static_cast<const char*>(b.data);
    return a0 < b0 + extent(b, Tb) && b0 < a0 + extent(a, Ta);
  }
  static bool touches(const Op& o, const Tensor& t, int64_t T) {
    for (const Tensor* x : {&o.a, &o.b, &o.c, &o.d})
      if (overlaps(*x, o.T, t, T)) return true;
    return false;
  }
  // An in-place residual update h += f(delta) of the T rows of exactly h (same view: data, ld, cols) whose delta
  // does not read h, and which is followed by what a fused GEMV takes (a norm or the linear itself): fused_linear
  // can run it as a prologue reading h from the shadow.
  bool is_residual_update(const std::vector<Op>& ops, size_t k, const Tensor& h, int64_t T) const {
    const Op& o = ops[k];
    return (o.kind == OpKind::add || o.kind == OpKind::add_rms_norm) && o.T == T && same(o.c, h) &&
           o.c.cols == h.cols && o.c.dtype == DType::f32 && o.a.dtype == DType::f32 && !overlaps(o.a, T, h, T) &&
           k + 1 < ops.size() && (ops[k + 1].kind == OpKind::rms_norm || ops[k + 1].kind == OpKind::linear);
  }
  // Whether the next op after `from` that touches h is such an update (then h may go to the shadow).
  bool next_touch_is_update(const std::vector<Op>& ops, size_t from, const Tensor& h, int64_t T) const {
    for (size_t k = from; k < ops.size(); ++k)
      if (touches(ops[k], h, T)) return is_residual_update(ops, k, h, T);
    return false;
  }
  // Copies the T rows the shadow holds back home (row by row: h may be a strided view whose gaps belong to others).
  cudaError_t copy_residual_home() {
    const Tensor& h = redirect_.home;
    const size_t es = dtype_size(h.dtype), pitch = size_t(h.ld) * es;
    return cudaMemcpy2DAsync(h.data, pitch, hshadow_.p, pitch, size_t(h.cols) * es, size_t(redirect_.T),
                             cudaMemcpyDeviceToDevice, stream_);
  }
  void materialize_residual() {
    if (!redirect_.active) return;
    redirect_.active = false;
    ++stats_.residual_copies;
    ck(copy_residual_home(), "cudaMemcpy2DAsync(residual)");
  }

  // Runs the ops; on an exception no redirect survives: eagerly, the redirecting kernel ran and h's value is in the
  // shadow (copied home, best effort: the stream may be broken); in a capture nothing ran and h at home is current.
  void run(std::vector<Op>& ops) {
    const kc::ScopedLaunchTuning launch_tuning(tuning_);  // PDL and GEMV switches of every launch below
    try {
      run_ops(ops);
    } catch (...) {
      if (redirect_.active) {
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream_, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone)
          copy_residual_home();
        cudaGetLastError();
        redirect_.active = false;
      }
      throw;
    }
  }
  void run_ops(std::vector<Op>& ops) {
    size_t i = 0;
    while (i < ops.size()) {
      if (offload_) order_offload(ops, i);
      size_t used = fuse_ ? fused_attention(ops, i) : 0;  // (attention never touches the residual)
      if (!used && fuse_) used = fused_mamba_mixer(ops, i);  // (before fused_linear takes x_proj alone)
      if (!used) used = fused_linear(ops, i, fuse_);       // handles the shadow itself
      if (!used && fuse_) used = fused_quant(ops, i);
      if (!used) {
        if (redirect_.active && touches(ops[i], redirect_.home, redirect_.T)) materialize_residual();
        single(ops[i]);
        used = 1;
      }
      i += used;
    }
    materialize_residual();
  }

  // Weight offload, before the group of kernels at ops[i]: a pass starts at its embedding; the next linear op to
  // launch names the layer whose slot the compute stream must wait for (every linear of the layers before it was
  // launched already, so their slots may load the next layers).
  void order_offload(const std::vector<Op>& ops, size_t i) {
    if (ops[i].kind == OpKind::embed) offload_->pass_start(stream_);
    for (size_t k = i; k < ops.size(); ++k)
      if (ops[k].kind == OpKind::linear) {
        offload_->next_linear(ops[k].layer, stream_);
        break;
      }
  }

  // [rms_norm] linear (quantized, T <= 8 rows) [add | gated_act] as one quantized GEMV: the norm of the row as its
  // prologue (it reads the raw x, writes the normed row as the norm would), the residual add after an o / down
  // projection (h += out; f32 out, no bias) or, for one row, the gated activation after gate|up (two segments of one
  // type) as its epilogue. Returns the ops consumed (0: none of the three fusions applies).
  size_t fused_quant(const std::vector<Op>& ops, size_t i) {
    size_t j = i;
    const Op* nm = ops[j].kind == OpKind::rms_norm ? &ops[j++] : nullptr;
    if (j >= ops.size() || ops[j].kind != OpKind::linear || !is_quant(ops[j].M) || ops[j].T > kQuantGemvRows) return 0;
    const Op& lin = ops[j++];
    const int64_t K = lin.M.cols, N = lin.M.rows, T = lin.T;
    if (nm) {  // f32 rows normed over the whole row; x, the normed row and the output apart (one warp writes xn)
      if (nm->T != T || nm->group != K || nm->a.cols != K || bf(nm->a) || bf(nm->c) || !same(lin.a, nm->c)) return 0;
      if (overlaps(nm->a, T, nm->c, T) || overlaps(nm->c, T, lin.c, T) || overlaps(nm->a, T, lin.c, T)) return 0;
    }
    const Tensor& x = nm ? nm->a : lin.a;
    const Op* ad = nullptr;
    const Op* ga = nullptr;
    if (j < ops.size() && ops[j].kind == OpKind::add) {
      const Op& a = ops[j];
      if (a.T == T && same(a.a, lin.c) && a.a.cols == N && a.c.cols == N && !bf(lin.c) && !bf(a.c) &&
          !lin.M.bias.data && !overlaps(a.c, T, x, T) && !overlaps(a.c, T, lin.c, T) &&
          !(nm && overlaps(a.c, T, nm->c, T)))
        ad = &ops[j++];
    } else if (j < ops.size() && ops[j].kind == OpKind::gated_act) {
      const Op& g = ops[j];
      const QuantMatrix& q = quant_of(lin.M);
      if (T == 1 && g.T == 1 && same(g.a, lin.c) && g.c.cols * 2 == N && !bf(lin.c) && !bf(g.c) && !lin.M.bias.data &&
          q.segments.size() == 2 && q.segments[0].type == q.segments[1].type && q.segments[0].rows * 2 == N &&
          !bf(x) && !overlaps(g.c, 1, x, 1) && !overlaps(g.c, 1, lin.c, 1) && !(nm && overlaps(g.c, 1, nm->c, 1)))
        ga = &ops[j++];
    }
    if (!nm && !ad && !ga) return 0;
    if (redirect_.active)
      for (size_t k = i; k < j; ++k)
        if (touches(ops[k], redirect_.home, redirect_.T)) {
          materialize_residual();
          break;
        }
    if (ga) {
      const QuantMatrix& q = quant_of(lin.M);
      kc::QuantGemvFusion f;
      if (nm) {
        f.norm_w = static_cast<const float*>(nm->b.data), f.eps = nm->f;
        f.norm_out = static_cast<float*>(nm->c.data), f.ld_norm_out = nm->c.ld;
      }
      kc::gemv_quant_gated(static_cast<const float*>(x.data), q.segments[0].blocks, q.segments[1].blocks,
                           q.segments[0].type, N / 2, K, static_cast<float*>(lin.c.data),
                           static_cast<float*>(ga->c.data), to_act(ga->act), stream_, f);
      ++stats_.quant_fused_gated;
    } else {
      linear_quant(lin, ad ? &ad->c : nullptr, nm);
    }
    if (nm) ++stats_.quant_fused_norms;
    if (ad) ++stats_.quant_fused_adds;
    return j - i;
  }

  // [rms_norm(q|k) ... rope(q|k) ...] attention, T == 1. Returns the ops consumed (0: no match).
  size_t fused_attention(const std::vector<Op>& ops, size_t i) {
    const Op* qn = nullptr;
    const Op* kn = nullptr;
    const Op* qr = nullptr;
    const Op* kr = nullptr;
    size_t j = i;
    while (j < ops.size() && j < i + 4 && (ops[j].kind == OpKind::rms_norm || ops[j].kind == OpKind::rope)) ++j;
    if (j >= ops.size() || ops[j].kind != OpKind::attention) return 0;
    const Op& at = ops[j];
    if ((at.T != 1 && !at.exact) || at.b.dtype != at.a.dtype || at.c.dtype != at.a.dtype) return 0;  // f32/bf16 q/k/v
    for (size_t t = i; t < j; ++t) {
      const Op& o = ops[t];
      if (o.T != at.T || o.a.dtype != at.a.dtype) return 0;
      const bool isq = same(o.a, at.a), isk = same(o.a, at.b);
      if (!isq && !isk) return 0;
      if (o.kind == OpKind::rms_norm) {
        if (!same(o.a, o.c) || o.group != at.ap.head_dim) return 0;
        const Op*& slot = isq ? qn : kn;
        if (slot || (isq ? qr : kr)) return 0;  // twice, or after the rope
        slot = &o;
      } else {
        if (o.head_dim != at.ap.head_dim || o.heads != (isq ? at.ap.heads : at.ap.kv_heads)) return 0;
        const Op*& slot = isq ? qr : kr;
        if (slot) return 0;
        slot = &o;
      }
    }
    if (bool(qr) != bool(kr)) return 0;
    if (qr && (qr->b.data != kr->b.data || qr->f != kr->f)) return 0;
    if (qn && kn && qn->f != kn->f) return 0;
    decode_attention(at, qn, kn, qr);
    return j - i + 1;
  }

  // [add | add_rms_norm] [rms_norm] linear [gated_act | softcap] as one GEMV. With fuse=false only a lone linear
  // (plain GEMV) matches.
  size_t fused_linear(const std::vector<Op>& ops, size_t i, bool fuse) {
    size_t j = i;
    const Op* pre = nullptr;
    const Op* norm = nullptr;
    if (fuse && (ops[j].kind == OpKind::add || ops[j].kind == OpKind::add_rms_norm)) pre = &ops[j++];
    if (fuse && j < ops.size() && ops[j].kind == OpKind::rms_norm) norm = &ops[j++];
    if (j >= ops.size() || ops[j].kind != OpKind::linear) return 0;
    const Op& lin = ops[j++];
    if (!gemv_ok(lin)) return 0;
    const int64_t K = lin.M.cols, T = lin.T;
    auto f32 = [](const Tensor& t) { return t.dtype == DType::f32; };
    if (pre) {  // pre: a = delta, c = residual
      if (pre->T != T || !f32(pre->a) || !f32(pre->c) || pre->a.cols != K || pre->c.cols != K) return 0;
      if (norm ? !same(norm->a, pre->c) : !same(lin.a, pre->c)) return 0;
      if (norm && pre->kind == OpKind::add_rms_norm && pre->f != norm->f) return 0;
    }
    if (norm) {  // norm: a = x, c = out
      if (norm->T != T || norm->group != K || norm->a.cols != K || !f32(norm->a) || !f32(norm->c)) return 0;
      if (!same(lin.a, norm->c)) return 0;
      // An in-place norm of the updated residual (out == h) would be overwritten by the h side output: unfused.
      if (pre && overlaps(norm->c, T, pre->c, T)) return 0;
    }
    // Residual ping-pong (run()): a prologue update of the redirected residual reads the shadow and writes h home;
    // any other op of this group touching it needs it home first.
    const bool from_shadow = redirect_.active && pre && pre->T == redirect_.T &&
                             is_residual_update(ops, i, redirect_.home, redirect_.T);
    if (redirect_.active && !from_shadow)
      for (size_t k = i; k < j; ++k)
        if (touches(ops[k], redirect_.home, redirect_.T)) {
          materialize_residual();
          break;
        }
    kc::GemvIn in;
    kc::GemvOut out;
    const Tensor& x = pre ? pre->c : (norm ? norm->a : lin.a);
    in.x = x.data, in.x_bf16 = bf(x), in.ldx = x.ld;  // pre / norm need f32 (checked above); a lone x may be bf16
    if (pre) {
      in.d = static_cast<const float*>(pre->a.data), in.ldd = pre->a.ld;
      if (pre->kind == OpKind::add_rms_norm) in.post_w = static_cast<const float*>(pre->b.data), in.eps = pre->f;
      in.h_out = static_cast<float*>(pre->c.data), in.ldh = pre->c.ld;
    }
    if (norm) {
      in.norm_w = static_cast<const float*>(norm->b.data), in.eps = norm->f;
      in.a_out = static_cast<float*>(norm->c.data), in.lda = norm->c.ld;
    }
    Tensor y = lin.c;
    int64_t N = lin.M.rows;
    if (fuse && j < ops.size() && ops[j].kind == OpKind::ssm_conv && conv_epilogue_fits(lin, ops[j])) {
      const Op& cv = ops[j++];  // a = x (lin.c's first columns), b = taps, c = xc, d = bias, ssm[0] = state
      out.conv_w = static_cast<const float*>(cv.b.data), out.conv_b = static_cast<const float*>(cv.d.data);
      out.conv_state = static_cast<float*>(cv.ssm[0].data), out.conv_out = static_cast<float*>(cv.c.data);
      out.conv_channels = cv.a.cols, out.conv_width = int(cv.ssm[0].cols);
    } else if (fuse && j < ops.size() && ops[j].kind == OpKind::gated_act && same(ops[j].a, lin.c) && ops[j].T == T &&
        ops[j].c.cols * 2 == N && lin.M.rows % 2 == 0 && f32(ops[j].c) && f32(lin.c)) {
      out.act = to_act(ops[j].act);
      out.gu_out = static_cast<float*>(lin.c.data), out.ldgu = lin.c.ld;
      y = ops[j].c;
      N /= 2;
      ++j;
    } else if (fuse && j < ops.size() && ops[j].kind == OpKind::softcap && same(ops[j].a, lin.c) && ops[j].T == T) {
      out.softcap = ops[j].f;
      ++j;
    }
    // The output must not overlap an input the prologue reads.
    for (const void* p : {in.x, static_cast<const void*>(in.d), static_cast<const void*>(in.h_out),
                          static_cast<const void*>(in.a_out)})
      if (p && p == y.data) return 0;
    out.y = y.data, out.y_bf16 = bf(y), out.ldy = y.ld;
    out.bias = lin.M.bias.data ? static_cast<const float*>(lin.M.bias.data) : nullptr;
    if (from_shadow) {
      in.x = hshadow_.p;  // same layout as h (ld); h_out stays h
      redirect_.active = false;
    } else if (pingpong_ && pre && !redirect_.active && hshadow_.bytes >= extent_rows(pre->c, T) &&
               next_touch_is_update(ops, j, pre->c, T)) {
      in.h_out = static_cast<float*>(hshadow_.p);
      redirect_ = Redirect{true, pre->c, T};
      ++stats_.residual_redirects;
    }
    kc::gemv_bf16(in, static_cast<const uint16_t*>(lin.M.w.data), N, K, int(T), out, counters_, stream_);
    if (out.conv_out) ++stats_.mamba_fused_convs;
    return j - i;
  }

  // Mamba decode (engine/mamba_fusion.hpp). The conv op after in_proj: its x is the first columns of the GEMV's
  // one f32 output row, its other operands are f32 buffers apart from the GEMV's.
  bool conv_epilogue_fits(const Op& lin, const Op& cv) const {
    const Tensor& st = cv.ssm[0];
    MambaStepShape sh;
    sh.rows = cv.T, sh.d_inner = cv.a.cols, sh.conv_width = st.cols;
    sh.f32 = lin.c.dtype == DType::f32 && cv.a.dtype == DType::f32 && cv.b.dtype == DType::f32 &&
             cv.c.dtype == DType::f32 && st.dtype == DType::f32 && (!cv.d.data || cv.d.dtype == DType::f32);
    sh.contiguous_state = st.ld == st.cols && st.rows == cv.a.cols;
    return mamba_conv_epilogue_ok(sh) && lin.T == 1 && cv.a.data == lin.c.data && cv.a.cols <= lin.M.rows &&
           cv.b.cols * cv.b.rows >= cv.a.cols * st.cols && (!cv.d.data || cv.d.cols * cv.d.rows >= cv.a.cols) &&
           !overlaps(cv.c, 1, lin.c, 1) && !overlaps(st, st.rows, lin.c, 1) && !overlaps(cv.c, 1, lin.a, 1);
  }
  // linear(x_proj) linear(dt_proj) ssm_scan of one row as one kernel: x_proj reads xc into dbc, dt_proj reads dbc's
  // first dt_rank columns into dt, the scan reads xc, dt and B / C from dbc. Returns the ops consumed (0: no match).
  size_t fused_mamba_mixer(const std::vector<Op>& ops, size_t i) {
    if (i + 2 >= ops.size() || ops[i].kind != OpKind::linear || ops[i + 1].kind != OpKind::linear ||
        ops[i + 2].kind != OpKind::ssm_scan)
      return 0;
    const Op &xp = ops[i], &dp = ops[i + 1], &sc = ops[i + 2];
    const Tensor &dbc = xp.c, &st = sc.ssm[4];
    const int64_t Di = xp.M.cols, R = dp.M.cols, N = st.cols;
    const auto f32 = [](const Tensor& t) { return t.dtype == DType::f32; };
    MambaStepShape sh;
    sh.rows = std::max({xp.T, dp.T, sc.T}), sh.d_inner = Di, sh.dt_rank = R, sh.d_state = N;
    sh.f32 = f32(xp.a) && f32(dbc) && f32(dp.c) && f32(sc.c) && f32(sc.d) && f32(sc.ssm[2]) && f32(sc.ssm[3]) &&
             f32(st) && (!dp.M.bias.data || f32(dp.M.bias));
    sh.contiguous_state = st.ld == N && st.rows == Di && sc.ssm[2].cols * sc.ssm[2].rows >= Di * N;
    const uintptr_t wbits = reinterpret_cast<uintptr_t>(xp.M.w.data) | reinterpret_cast<uintptr_t>(dp.M.w.data);
    sh.bf16_weights = !is_quant(xp.M) && !is_quant(dp.M) && xp.M.w.dtype == DType::bf16 &&
                      dp.M.w.dtype == DType::bf16 && xp.M.w.ld == Di && dp.M.w.ld == R && (wbits & 15u) == 0;
    sh.x_proj_bias = xp.M.bias.data != nullptr;
    if (!mamba_mixer_step_ok(sh) || xp.T != 1 || dp.T != 1 || sc.T != 1) return 0;
    // The schedule's buffers: dt_low, B, C are dbc's column slices [0, R), [R, R + N), [R + N, R + 2N); u is xc.
    const auto col = [&](int64_t k) { return static_cast<const char*>(dbc.data) + k * 4; };
    if (xp.M.rows != R + 2 * N || dbc.cols != R + 2 * N || dp.a.data != dbc.data || dp.M.rows != Di ||
        sc.ssm[0].data != col(R) || sc.ssm[1].data != col(R + N) || sc.ssm[0].cols != N || sc.ssm[1].cols != N ||
        !same(sc.a, xp.a) || sc.a.cols != Di || !same(sc.b, dp.c) || sc.b.cols != Di || sc.c.cols != Di ||
        sc.d.cols != Di)
      return 0;
    // Outputs apart from the inputs every block reads (xc, z, the state it owns is read then written per thread).
    for (const Tensor* o : {&dbc, &dp.c, &sc.c})
      if (overlaps(*o, 1, xp.a, 1) || overlaps(*o, 1, sc.d, 1) || overlaps(*o, 1, st, st.rows)) return 0;
    if (overlaps(sc.c, 1, dbc, 1) || overlaps(sc.c, 1, dp.c, 1) || overlaps(dbc, 1, dp.c, 1)) return 0;
    if (redirect_.active)
      for (size_t k = i; k < i + 3; ++k)
        if (touches(ops[k], redirect_.home, redirect_.T)) {
          materialize_residual();
          break;
        }
    kc::MambaStepArgs a;
    auto fp = [](const Tensor& t) { return static_cast<float*>(t.data); };
    a.xc = fp(xp.a), a.z = fp(sc.d), a.A = fp(sc.ssm[2]), a.D = sc.ssm[3].data ? fp(sc.ssm[3]) : nullptr;
    a.w_x = static_cast<const uint16_t*>(xp.M.w.data), a.w_dt = static_cast<const uint16_t*>(dp.M.w.data);
    a.dt_bias = dp.M.bias.data ? fp(dp.M.bias) : nullptr;
    a.state = fp(st), a.dbc = fp(dbc), a.dt = fp(dp.c), a.y = fp(sc.c);
    a.d_inner = Di, a.dt_rank = int(R), a.d_state = int(N);
    a.channels = tuning_.cuda_mamba_channels;  // 0: mamba_step_channels' choice for the device
    kc::mamba_mixer_step(a, stream_);
    ++stats_.mamba_fused_mixers;
    return 3;
  }

  void decode_attention(const Op& at, const Op* qn, const Op* kn, const Op* rope) {
    if (at.b.dtype != at.a.dtype || at.c.dtype != at.a.dtype)
      fail(Status::internal, "cuda decode attention: q, k and v of different dtypes");
    kc::DecodeAttnArgs a;
    a.q = at.a.data, a.k = at.b.data, a.v = at.c.data, a.in_bf16 = bf(at.a);
    if (qn) a.q_norm_w = static_cast<const float*>(qn->b.data), a.eps = qn->f;
    if (kn) a.k_norm_w = static_cast<const float*>(kn->b.data), a.eps = kn->f;
    if (rope) a.inv_freq = static_cast<const float*>(rope->b.data), a.attn_scaling = rope->f;
    a.k_cache = at.kv.k.data, a.v_cache = at.kv.v.data, a.cache_bf16 = at.kv.k.dtype == DType::bf16;
    a.capacity = at.kv.capacity, a.ring = at.kv.ring, a.window = at.ap.window;
    a.pos0 = d_step_;
    a.scale = at.ap.scale > 0 ? at.ap.scale : 1.0f / std::sqrt(float(at.ap.head_dim));
    a.softcap = at.ap.softcap;
    a.out = at.d.data, a.out_bf16 = bf(at.d);
    a.heads = int(at.ap.heads), a.kv_heads = int(at.ap.kv_heads), a.head_dim = int(at.ap.head_dim);
    a.splits = splits_for(at);
    a.part = static_cast<float*>(part_.p);
    a.counters = counters_ + 1;
    a.merge = tuning_.engine_decode_merge;
    if (at.T > 1) kc::decode_attention_rows(a, at.T, at.a.ld, at.b.ld, at.c.ld, at.d.ld, stream_);  // decode-exact
    else kc::decode_attention(a, stream_);
  }

  // Prefill attends over the cache in place when it is bf16 (the flash kernel's dtype) and its rows are in position
  // order (a linear cache, or a ring that has not wrapped by the end of the chunk); a wrapped ring (whose old window
  // must be unrolled in position order) or an f32 cache is gathered into bf16 scratch first.
  static bool needs_gather(const KVLayer& kv, int64_t pos0, int64_t T) {
    return kv.k.dtype != DType::bf16 || (kv.ring && pos0 + T > kv.capacity);
  }
  // Positions before pos0 a gathered chunk attends to.
  static int64_t gather_old(const Op& o, int64_t pos0) {
    int64_t n_old = pos0;
    if (o.ap.window > 0) n_old = std::min(n_old, o.ap.window - 1);
    if (o.kv.ring) n_old = std::min(n_old, o.kv.capacity - 1);
    return n_old;
  }

  // flashkit's flash attention forward over T query rows (bf16 [T, heads * D] at row stride ldq / ldo) and nk keys
  // (bf16 [nk, kvd], contiguous), causal with the diagonal bottom-right (the rows are the last T positions), the
  // layer's window and softcap; lse into lse_ (>= T * heads floats).
  void flash_rows(const void* qp, int64_t ldq, const void* kp, const void* vp, int64_t nk, int64_t kvd, void* outp,
                  int64_t ldo, int64_t T, const AttentionParams& ap) {
    const int64_t H = ap.heads, KVH = ap.kv_heads, D = ap.head_dim;
    // [1, rows, heads, D] over rows of stride ld
    auto view = [&](const void* p, DType dt, int64_t rows, int64_t heads, int64_t ld) {
      TensorView t = TensorView::contiguous(const_cast<void*>(p), dt, {1, rows, heads, D}, Device::cuda);
      t.strides = {rows * ld, ld, D, 1};
      t.device_index = dev_;
      return t;
    };
    AttentionOptions opt;
    opt.tuning = tuning_;
    opt.scale = ap.scale > 0 ? ap.scale : 0.0f;
    opt.causal = true;
    opt.window_left = ap.window > 0 ? ap.window - 1 : -1;
    opt.softcap = ap.softcap;
    opt.check_finite = false;
    TensorView lse = TensorView::contiguous(lse_.p, DType::f32, {1, H, T}, Device::cuda);
    lse.device_index = dev_;
    void* prev = flashkit::cuda_stream();
    flashkit::set_cuda_stream(stream_);
    try {
      attention_forward(view(qp, DType::bf16, T, H, ldq), view(kp, DType::bf16, nk, KVH, kvd),
                        view(vp, DType::bf16, nk, KVH, kvd), view(outp, DType::bf16, T, H, ldo), lse, opt);
    } catch (...) {
      flashkit::set_cuda_stream(prev);
      throw;
    }
    flashkit::set_cuda_stream(prev);
  }

  // A batched paged step's attention (engine/paged_spans.hpp): the step's k/v rows into their slots, then each
  // decode span through the paged decode kernel and each prompt chunk through the flash kernel over its gathered
  // keys (q / out through bf16 scratch when the step's activations are f32).
  void paged_attention_op(const Op& o) {
    kc::paged_store(o.b, o.c, o.pkv, o.T, o.ap, pstep_, stream_);
    const int64_t H = o.ap.heads, D = o.ap.head_dim, kvd = o.ap.kv_heads * D;
    for (const PagedSpan& sp : pspans_) {
      if (!sp.chunk) {
        kc::paged_decode_rows(o.a, o.pkv, o.d, sp.row0, sp.rows, o.ap, pstep_, paged_splits(o, sp.rows),
                              static_cast<float*>(ppart_.p), stream_);
        continue;
      }
      const Tensor q = o.a.row_slice(sp.row0, sp.rows), out = o.d.row_slice(sp.row0, sp.rows);
      kc::paged_gather_chunk(o.pkv, o.ap, pstep_, sp, static_cast<uint16_t*>(kt_.p), static_cast<uint16_t*>(vt_.p),
                             stream_);
      const void* qp = q.data;
      int64_t ldq = q.ld;
      if (!bf(q)) {
        kc::convert_rows(q.data, false, q.ld, q16_.p, true, H * D, sp.rows, H * D, stream_);
        qp = q16_.p, ldq = H * D;
      }
      void* outp = bf(out) ? out.data : o16_.p;
      const int64_t ldo = bf(out) ? out.ld : H * D;
      flash_rows(qp, ldq, kt_.p, vt_.p, sp.keys(o.ap.window), kvd, outp, ldo, sp.rows, o.ap);
      if (!bf(out)) kc::convert_rows(o16_.p, true, H * D, out.data, false, out.ld, sp.rows, H * D, stream_);
    }
  }
  bool chunk_step() const { return paged_ && pchunks_; }

  void prefill_attention(const Op& o) {
    const int64_t T = o.T, H = o.ap.heads, KVH = o.ap.kv_heads, D = o.ap.head_dim, kvd = KVH * D;
    const int64_t P = host_pos0_;
    const bool cbf = o.kv.k.dtype == DType::bf16;
    const KVLayer& kv = o.kv;
    // q and out in bf16: used in place when they are (strided column slices are fine for the flash kernel; it
    // repacks rows that are not 16-byte aligned), else converted through scratch.
    const void* qp = o.a.data;
    int64_t ldq = o.a.ld;
    if (!bf(o.a)) {
      kc::convert_rows(o.a.data, false, o.a.ld, q16_.p, true, H * D, T, H * D, stream_);
      qp = q16_.p, ldq = H * D;
    }
    void* outp = o.d.data;
    int64_t ldo = o.d.ld;
    if (!bf(o.d)) outp = o16_.p, ldo = H * D;
    const void* kp;
    const void* vp;
    int64_t nk;
    const bool gather = needs_gather(kv, P, T);
    if (gather) {
      const int64_t n_old = gather_old(o, P);
      kc::kv_gather(kv.k.data, kv.v.data, cbf, kv.capacity, kv.ring, kvd, P, n_old, o.b.data, o.b.ld, o.c.data, o.c.ld,
                    bf(o.b), T, static_cast<uint16_t*>(kt_.p), static_cast<uint16_t*>(vt_.p), stream_);
      kp = kt_.p, vp = vt_.p, nk = n_old + T;
    } else {
      kc::kv_append(o.b.data, o.b.ld, o.c.data, o.c.ld, bf(o.b), kv.k.data, kv.v.data, cbf, kvd, kv.capacity, kv.ring,
                    T, d_step_, stream_);
      kp = kv.k.data, vp = kv.v.data, nk = P + T;
    }
    flash_rows(qp, ldq, kp, vp, nk, kvd, outp, ldo, T, o.ap);
    if (!bf(o.d)) kc::convert_rows(o16_.p, true, H * D, o.d.data, false, o.d.ld, T, H * D, stream_);
    if (gather)
      kc::kv_append(o.b.data, o.b.ld, o.c.data, o.c.ld, bf(o.b), kv.k.data, kv.v.data, cbf, kvd, kv.capacity, kv.ring,
                    T, d_step_, stream_);
  }

  void gemm(const Op& o) {
    const int64_t T = o.T, N = o.M.rows, K = o.M.cols;
    if (T <= 0 || N <= 0) return;
    if (is_quant(o.M)) return linear_quant(o);
    if (o.M.w.dtype != DType::bf16) fail(Status::internal, "cuda linear: weights are not bf16");
    const void* xb = o.a.data;
    int64_t ldx = o.a.ld;
    if (!bf(o.a)) {
      kc::convert_rows(o.a.data, false, o.a.ld, bfx_.p, true, K, T, K, stream_);
      xb = bfx_.p, ldx = K;
    }
    const float one = 1.0f, zero = 0.0f;
    ckb(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &one, o.M.w.data, CUDA_R_16BF,
                     int(o.M.w.ld), xb, CUDA_R_16BF, int(ldx), &zero, o.c.data, bf(o.c) ? CUDA_R_16BF : CUDA_R_32F,
                     int(o.c.ld), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
    if (o.M.bias.data)
      kc::add_bias(o.c.data, o.c.ld, bf(o.c), static_cast<const float*>(o.M.bias.data), T, N, stream_);
  }

  void single(const Op& o) {
    const int32_t* tokens = o.paged ? pstep_.tokens() : d_step_ + 1;
    switch (o.kind) {
      case OpKind::embed:
        if (is_quant(o.M)) {
          const auto& seg = quant_of(o.M).segments[0];
          kc::embed_quant(seg.blocks, seg.type, o.M.rows, o.M.cols, tokens, o.T, o.a.data, bf(o.a), o.a.ld, o.f, stream_);
          break;
        }
        kc::embed(o.M.w.data, bf(o.M.w), o.M.w.ld, o.M.rows, tokens, o.a.data, bf(o.a), o.a.ld, o.T, o.M.cols, o.f,
                  stream_);
        break;
      case OpKind::rms_norm:
        if (o.a.data == o.c.data && bf(o.a) != bf(o.c)) fail(Status::internal, "cuda rms_norm: in place across dtypes");
        kc::rms_norm(o.a.data, o.a.ld, bf(o.a), static_cast<const float*>(o.b.data), o.c.data, o.c.ld, bf(o.c), o.T,
                     o.a.cols, o.group, o.f, stream_);
        break;
      case OpKind::add_rms_norm:
        same_dtype(o.a, o.c, "add_rms_norm");
        kc::add_rms_norm(o.a.data, o.a.ld, static_cast<const float*>(o.b.data), o.c.data, o.c.ld, bf(o.a), o.T,
                         o.a.cols, o.f, stream_);
        break;
      case OpKind::linear: gemm(o); break;  // GEMV-sized ones were taken by fused_linear
      case OpKind::rope:
        if (o.paged)
          kc::rope_positions(o.a.data, o.a.ld, bf(o.a), o.T, o.heads, o.head_dim, static_cast<const float*>(o.b.data),
                             o.f, pstep_.positions(), stream_);
        else
          kc::rope(o.a.data, o.a.ld, bf(o.a), o.T, o.heads, o.head_dim, static_cast<const float*>(o.b.data), o.f,
                   d_step_, stream_);
        break;
      case OpKind::paged_attention: paged_attention_op(o); break;
      case OpKind::gather_rows: kc::gather_rows(o.a, o.c, o.T, pstep_, stream_); break;
      case OpKind::argmax_rows:
        kc::argmax_rows_f32(static_cast<const float*>(o.a.data), o.a.ld, o.T, o.a.cols,
                            static_cast<int32_t*>(argrows_.p), stream_);
        break;
      case OpKind::attention:
        if (o.T == 1 || o.exact) decode_attention(o, nullptr, nullptr, nullptr);
        else prefill_attention(o);
        break;
      case OpKind::gated_act:
        same_dtype(o.a, o.c, "gated_act");
        kc::gated_act(o.a.data, o.a.ld, o.c.data, o.c.ld, bf(o.a), o.T, o.c.cols, to_act(o.act), stream_);
        break;
      case OpKind::add:
        same_dtype(o.a, o.c, "add");
        kc::add(o.a.data, o.a.ld, o.c.data, o.c.ld, bf(o.a), o.T, o.a.cols, stream_);
        break;
      case OpKind::softcap: kc::softcap(o.a.data, o.a.ld, bf(o.a), o.T, o.a.cols, o.f, stream_); break;
      case OpKind::ssm_conv: ssm_conv(o); break;
      case OpKind::ssm_scan: ssm_scan(o); break;
      case OpKind::argmax:
        kc::argmax_f32(static_cast<const float*>(o.a.data), o.a.cols, argpart_.p, reinterpret_cast<unsigned*>(argmax_dev_),
                       argmax_dev_ + 1, stream_);
        break;
    }
  }
  // Mamba ops: one sequence of T rows (batch 1), engine tensors as the kernels' strided views.
  void ssm_conv(const Op& o) {
    for (const Tensor* t : {&o.a, &o.b, &o.c, &o.ssm[0]})
      if (t->dtype != DType::f32) fail(Status::internal, "cuda ssm conv1d: operands must be f32");
    kernels::ConvArgs k;
    k.batch = 1, k.seqlen = o.T, k.channels = o.a.cols, k.width = o.ssm[0].cols;
    k.x = static_cast<const float*>(o.a.data), k.weight = static_cast<const float*>(o.b.data);
    k.bias = static_cast<const float*>(o.d.data), k.state = static_cast<float*>(o.ssm[0].data);
    k.out = static_cast<float*>(o.c.data);
    k.x_b = o.T * o.a.ld, k.x_t = o.a.ld, k.o_b = o.T * o.c.ld, k.o_t = o.c.ld;
    k.silu = true;
    kernels::causal_conv1d_cuda(k, stream_);
  }
  void ssm_scan(const Op& o) {
    for (const Tensor* t : {&o.a, &o.b, &o.c, &o.d, &o.ssm[0], &o.ssm[1], &o.ssm[2], &o.ssm[3], &o.ssm[4]})
      if (t->dtype != DType::f32) fail(Status::internal, "cuda selective scan: operands must be f32");
    kernels::ScanArgs k;
    k.batch = 1, k.seqlen = o.T, k.d_inner = o.a.cols, k.d_state = o.ssm[0].cols;
    auto f = [](const Tensor& t) { return static_cast<float*>(t.data); };
    k.u = f(o.a), k.delta = f(o.b), k.y = f(o.c), k.z = f(o.d);
    k.B = f(o.ssm[0]), k.C = f(o.ssm[1]), k.A = f(o.ssm[2]), k.D = f(o.ssm[3]), k.state = f(o.ssm[4]);
    k.u_b = o.T * o.a.ld, k.u_t = o.a.ld, k.dl_b = o.T * o.b.ld, k.dl_t = o.b.ld, k.y_b = o.T * o.c.ld, k.y_t = o.c.ld;
    k.z_b = o.T * o.d.ld, k.z_t = o.d.ld;
    k.B_b = o.T * o.ssm[0].ld, k.B_t = o.ssm[0].ld, k.C_b = o.T * o.ssm[1].ld, k.C_t = o.ssm[1].ld;
    k.softplus = true;
    if (o.T == 1) kernels::selective_scan_step_cuda(k, stream_);
    else kernels::selective_scan_cuda(k, stream_);
  }
  // The element-wise kernels take one dtype flag for both operands (the model never mixes them there).
  static void same_dtype(const Tensor& a, const Tensor& b, const char* op) {
    if (a.dtype != b.dtype)
      fail(Status::internal, std::string("cuda ") + op + ": operands of different dtypes (" +
                                 std::string(dtype_name(a.dtype)) + ", " + std::string(dtype_name(b.dtype)) + ")");
  }

  int dev_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t step_evt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* blas_ws_ = nullptr;
  unsigned int* counters_ = nullptr;
  int32_t* argmax_dev_ = nullptr;   // [counter, index, flags, pad]
  int32_t* argmax_host_ = nullptr;  // pinned [index, flags]
  bool bf16_acts_ = false;          // bf16 weights requested: bf16 intermediates and KV cache
  bool keep_quant_ = false;         // keep GGUF block-quantized matrices as their blocks
  uint64_t weight_bytes_ = 0;       // device bytes of the loaded matrices, biases and vectors (stats())
  std::set<void*> owned_;
  int32_t* d_step_ = nullptr;  // [pos0, tokens...]
  int32_t* h_step_ = nullptr;  // pinned staging copy
  void* pinned_ = nullptr;     // download_f32 staging
  size_t pinned_bytes_ = 0;
  int64_t step_rows_ = 0, host_pos0_ = 0;
  Scratch part_, bfx_, q16_, o16_, lse_, kt_, vt_, f32tmp_, argpart_, hshadow_, ppart_, argrows_;
  std::vector<int32_t> argrows_host_;  // argmax_rows_result's download (pageable: 8 bytes a row)
  kc::PagedStepBuffer pstep_;  // the current batched paged step's tables (set_paged_step)
  std::vector<PagedSpan> pspans_;  // its rows as decode spans and prompt chunks (paged_attention_op)
  bool pchunks_ = false;           // some span is a chunk: the step runs eagerly (graph_end)
  bool paged_ = false;         // set_paged_step was the last step input: queued ops read pstep_
  Scratch deq_;      // bf16 row panel of a dequantized matrix (prefill GEMM); sized at load
  Scratch xq_, yq_;  // f32 x / y of a quantized GEMV whose operands are bf16 (multi-row steps)
  // Residual ping-pong (see run()): while active, the current value of the residual at `home` is in hshadow_.
  struct Redirect {
    bool active = false;
    Tensor home;
    int64_t T = 0;  // rows held
  } redirect_;
  Stats stats_;
  std::unique_ptr<kc::WeightOffload> offload_;  // configure_offload (CPU offload of the last layers' matrices)
  int64_t layer_ = -1;                          // set_layer(): stamped on queued ops and placed matrices
  std::vector<Op> queue_;
  bool capturing_ = false, graphs_on_ = true, fuse_ = true, pingpong_ = true;
  bool exact_ = false;  // the current step is decode-exact (set_step_shape); reset by set_step / set_paged_step
  Tuning tuning_;  // graphs / fusion / ping-pong switches, the launch settings of run(), the prefill attention's
  uint64_t cap_key_ = 0;
  std::unordered_map<uint64_t, cudaGraphExec_t> graphs_;
  std::unordered_set<uint64_t> no_graph_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opts) { return std::make_unique<CudaBackend>(opts); }

}  // namespace flashkit::engine
