// The op-level contract every engine backend implements (CPU in src/engine/cpu, CUDA in src/engine/cuda).
//
// The model code (src/engine/model.cpp) owns the *schedule*: which op runs when, on which buffers, with which
// weights. A backend owns *memory and kernels*: it allocates device buffers, converts/uploads weights once at
// load, and runs the ops below. Backends trust their arguments (the model code checks shapes at load time);
// they throw flashkit::Error on device failures only.
//
// Memory model
//   * Tensor is a non-owning 2-D row-major handle {data, dtype, rows, cols, ld} on the backend's device. Row
//     stride `ld` (elements) lets one buffer be sliced by columns without copies: after a fused QKV linear
//     the q, k and v views are column slices of one [T, (H + 2*KVH) * head_dim] buffer.
//   * alloc() returns memory owned by the backend (released by free() or the backend's destructor). Pointers
//     never move, so anything built on them (a captured CUDA graph) stays valid for the buffer's lifetime.
//   * Activations. The residual stream h and the o-projection / down-projection output that is added to it are
//     f32. The other intermediates of a multi-row step (normed rows, qkv, attention output, gate|up, activation)
//     use activation_dtype(): f32 on the CPU; the CUDA backend picks bf16 for bf16 weights (half the bytes of a
//     long prefill; transformers computes bf16 models in bf16 too). Steps of one row (decode) keep f32
//     intermediates: they are a few KB, and the fused decode kernels write f32 side outputs. So every op must
//     accept bf16 or f32 where activation_dtype() can be bf16, including mixed calls (rms_norm from f32 h into a
//     bf16 row; linear from bf16 x into f32 o). Logits are f32 on the device and delivered to the host as f32 by
//     download_f32(), or reduced on the device by argmax() (greedy decoding).
//   * KV cache: allocated by the model with kv_dtype() (f32 on the CPU; bf16 on CUDA for bf16 weights).
//   * Weights: load_matrix() takes one or more checkpoint tensors [out_i, in] (memory-mapped host data in any
//     WeightType) and returns ONE matrix, the parts concatenated along `out` (the model fuses q/k/v into one
//     matrix and gate/up into one, so a decode step runs one GEMV instead of three). The backend converts to
//     the requested storage type (or the nearest it supports) once, here; nothing is converted per step.
//     Vectors (norm weights, biases) are f32; load_vector() adds `offset` element-wise at load, which is how
//     Gemma's (1 + w) RMSNorm becomes a plain multiply: the ops below never know which convention is used.
//
// Step inputs: the CUDA-graph rule
//   Everything that changes from one decode step to the next -- the token ids, the positions, the KV length --
//   is written by set_step() into a small backend-owned buffer, and the kernels READ IT FROM THERE. No op takes
//   a per-step value as a host argument: op arguments are shapes (T = rows of this step), buffer handles and
//   per-layer constants, identical on every decode step. So a backend can capture the whole decode step once
//   (per T and per session: the key passed to graph_begin) and replay it with no host synchronization:
//       set_step(tokens, pos0);                       // async upload into the step buffer (outside the graph)
//       if (!graph_replay(key)) {                     // false: not captured yet (or the backend has no graphs)
//         graph_begin(key);  ...every op of the step...;  graph_end(key);   // capture (and run) once
//       }
//       download_f32(logits)                          // the one host sync of a step
//   A greedy step queues argmax(logits) inside the captured step instead and reads argmax_result() (a few bytes)
//   instead of the logits row; that is a different op sequence, so it has its own graph key.
//   Position of row t of the step = pos0 + t. After the step the sequence holds pos0 + T tokens (that is the
//   KV length attention uses). Backends without graphs return false from graph_replay and ignore begin/end.
//
// KV cache (KVLayer)
//   Per layer, per sequence: k and v are [capacity, kv_heads * head_dim] (a Tensor each). A global layer has
//   capacity = the session's max context and stores position p in row p. A sliding-window layer keeps only
//   its window plus LoadOptions::kv_ring_slack rows: capacity = window + slack, a ring, position p in row
//   p % capacity. The slack is what makes speculative rollback possible: a step of up to slack + 1 rows overwrites
//   only positions older than the window of any position it may be rolled back to (docs/speculative.md). A query
//   at position p sees positions (p - window, p]; with slack, a full ring holds `slack` stale rows it must skip.
//   Paged blocks can later replace the two tensors with a block table without changing the op signature
//   (KVLayer grows a table pointer).
//
// attention(): appends, then attends
//   The op first writes the step's T new key/value rows into the cache (rows pos0..pos0+T-1, mod capacity for a
//   ring), then computes, for query row t at position p = pos0 + t, softmax(softcap(scale * q.k)) v over the keys
//   at positions j with j <= p and, for a windowed layer, j > p - window (HF's sliding mask), GQA mapping query
//   head h to kv head h / (heads / kv_heads). For T = 1 (decode) every cached key of a ring is visible, so the
//   ring can be read in slot order (softmax is order-free). For T > 1 on a ring that has wrapped (or will wrap
//   inside the chunk) the old window must be read BEFORE it is overwritten: the CPU backend unrolls the ring in
//   position order, concatenates the chunk and runs flashkit::attention_forward with the window mask, then
//   stores the chunk's last `capacity` rows. Prefill chunks never need graphs, decode (T = 1) always can.
//
// Paged KV cache and batched steps (serving: src/serve, docs/serving.md)
//   A server decodes many sequences in one step. Their keys/values live in a pool of fixed-size blocks per layer
//   (PagedKVLayer: rows [num_blocks * block_size, kv_heads * head_dim]; block b holds rows [b * bs, (b + 1) * bs))
//   and each sequence has a block table: its position p lives in row table[p / bs] * bs + p % bs. One batched step
//   is T rows from several sequences (a decode row each, or a chunk of a prompt), described by set_paged_step():
//   per row its token, its position and its sequence; per sequence its block table. Everything that changes per
//   step is there (the CUDA-graph rule above still holds; a captured step would be keyed by the step's shape). The
//   model code runs the same op schedule as for a session, with rope reading the per-row positions and
//   paged_attention() instead of attention(): it stores each row's k/v at its position's slot, then attends each row
//   over its own sequence's keys j <= position (and j > position - window for a windowed layer), GQA and softcap as
//   attention(). Rows of one sequence are contiguous and in position order. gather_rows() picks the rows whose
//   logits are wanted (the step's logit_rows) so the final norm and lm_head run on those rows only.
//   All layers share a sequence's block table (a windowed layer keeps its whole history; freeing out-of-window blocks
//   per layer is a later refinement). Backends without these ops throw Status::unsupported. The CUDA backend runs them
//   with the decode family's paged kernel (src/kernels/cuda/decode/paged.cu; engine/cuda/paged.cpp).
//
// Numerics expected of every backend (they define fidelity against transformers):
//   rms_norm:  y = x * rsqrt(mean(x^2) + eps) * w, mean over each group of `group` consecutive columns
//              (group = hidden for the block norms, head_dim for the per-head q/k norms), computed in f32.
//   rope:      HF "rotate half" layout: for i < d/2, (x_i, x_{i+d/2}) rotated by angle pos * inv_freq[i];
//              cos/sin multiplied by `attn_scaling`. inv_freq is a per-layer f32 table (d/2) the model computes
//              (default, linear (already divided by factor), llama3).
//   linear:    out[t, o] = sum_i x[t, i] * W[o, i] (+ bias[o]), f32 accumulation.
//   gated_act: out[t, f] = act(gu[t, f]) * gu[t, F + f] with gu = [gate | up]; act = gelu_tanh or silu.
//   softcap:   x = cap * tanh(x / cap).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "flashkit/dtype.hpp"
#include "flashkit/error.hpp"
#include "flashkit/tensor.hpp"
#include "flashkit/tuning.hpp"
#include "model/weights.hpp"

namespace flashkit::dist {
class Communicator;
}

namespace flashkit::engine {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t rows = 0, cols = 0;
  int64_t ld = 0;  // row stride in elements (>= cols)
  bool empty() const { return data == nullptr; }
  // Columns [c0, c0 + n) of every row (same ld).
  Tensor col_slice(int64_t c0, int64_t n) const {
    Tensor t = *this;
    t.data = static_cast<char*>(data) + c0 * dtype_size(dtype);
    t.cols = n;
    return t;
  }
  // Rows [r0, r0 + n).
  Tensor row_slice(int64_t r0, int64_t n) const {
    Tensor t = *this;
    t.data = static_cast<char*>(data) + r0 * ld * dtype_size(dtype);
    t.rows = n;
    return t;
  }
};

// A weight matrix [rows = out features, cols = in features] in the backend's storage type. `impl` is free
// for the backend (packed layouts, a cuBLAS descriptor, ...). bias is an f32 Tensor [1, rows] or empty.
struct Matrix {
  Tensor w;
  Tensor bias;
  int64_t rows = 0, cols = 0;
  std::shared_ptr<void> impl;
};

struct KVLayer {
  Tensor k, v;            // [capacity, kv_heads * head_dim]
  int64_t capacity = 0;   // rows
  bool ring = false;      // sliding window: position p lives in row p % capacity
};

struct AttentionParams {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0;        // applied to q.k
  float softcap = 0;      // 0: off
  int64_t window = 0;     // 0: global; else key j visible to query p iff p - window < j <= p
};

enum class Activation { gelu_tanh, silu };

// One layer's paged KV pool (see "Paged KV cache" above).
struct PagedKVLayer {
  Tensor k, v;             // [num_blocks * block_size, kv_heads * head_dim], kv_dtype()
  int64_t block_size = 0;  // rows per block
  int64_t num_blocks = 0;
};

// The per-step inputs of a batched paged step (host memory; the backend copies what it needs).
struct PagedStep {
  std::span<const int32_t> tokens;        // [T]
  std::span<const int32_t> positions;     // [T] position of each row in its sequence
  std::span<const int32_t> row_seq;       // [T] sequence of each row (index < num_seqs); contiguous, in position order
  std::span<const int32_t> block_tables;  // [num_seqs * max_blocks]: sequence s's i-th block at s * max_blocks + i
  std::span<const int32_t> logit_rows;    // rows whose logits are wanted, ascending (gather_rows)
  int64_t num_seqs = 0, max_blocks = 0;
};

// argmax() over one logits row, as the sampler's greedy choice defines it.
struct ArgmaxResult {
  int32_t index = -1;   // the first (lowest) index of the maximum; +0 and -0 are equal
  bool valid = false;   // false: the row holds a NaN or +inf, or only -inf (the sampler throws; index unspecified)
  bool unique = true;   // the maximum occurs once (top_k = 1 sampling keeps every tie, so it needs this)
};

struct BackendOptions {
  int threads = 0;          // CPU: 0 = flashkit::num_threads()
  int device_index = 0;     // CUDA
  DType weight_dtype = DType::f32;  // requested storage for matrices (f32 / bf16 / f16)
  // Keep GGUF block-quantized matrices (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) as their blocks and compute with them
  // (other matrices use weight_dtype). Such a Matrix has w.dtype == DType::i32 as its marker and its blocks in
  // Matrix::impl (backend-private). CPU: the blocks stay in the store's mapped file. CUDA: they are uploaded as they
  // are (no bf16 copy); decode multiplies them with a dequantize-in-kernel GEMV.
  bool keep_quantized = false;
  Tuning tuning;  // the model's resolved Tuning (LoadOptions::tuning or the process default)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu.avx2 (2 threads)", "cuda:0 NVIDIA H200"
  virtual DType activation_dtype() const = 0;  // intermediates of multi-row steps (see "Memory model")
  virtual DType kv_dtype() const = 0;          // KV-cache tensors

  // ---- memory ----
  virtual Tensor alloc(DType dtype, int64_t rows, int64_t cols) = 0;  // contiguous, ld = cols, uninitialized
  virtual void free(Tensor& t) = 0;                                     // t becomes empty
  virtual void upload(const Tensor& dst, const void* host, size_t bytes) = 0;   // into dst.data, contiguous
  virtual void download(void* host, const Tensor& src, size_t bytes) = 0;       // from src.data, contiguous
  // Rows [0, rows) of src (any activation dtype, any ld) as contiguous f32 on the host. Synchronizes.
  virtual void download_f32(float* host, const Tensor& src, int64_t rows) = 0;
  virtual void zero(const Tensor& t) = 0;
  virtual void synchronize() = 0;

  // ---- weights (once, at load) ----
  // parts: [out_i, in] each, same `in`; bias_parts: empty or one [out_i] per part (Qwen2's q/k/v biases).
  virtual Matrix load_matrix(std::span<const model::WeightView* const> parts,
                             std::span<const model::WeightView* const> bias_parts = {}) = 0;
  virtual Tensor load_vector(const model::WeightView& w, float offset) = 0;  // f32 [1, n], w + offset
  virtual Tensor upload_f32(std::span<const float> values) = 0;           // f32 [1, n] (rope tables, ...)
  virtual void free_matrix(Matrix& m) = 0;

  // ---- step inputs (see "Step inputs" above) ----
  // Sizes the step buffer for steps of up to max_rows rows; called before any set_step (at session creation;
  // growing it may move the buffer and drop captured graphs).
  virtual void reserve_step(int64_t max_rows) = 0;
  // T = tokens.size() rows (<= reserved); row t has position pos0 + t. Asynchronous on devices.
  virtual void set_step(std::span<const int32_t> tokens, int64_t pos0) = 0;
  // CUDA-graph hooks (key: opaque, chosen by the model: one per (session, T)); no-ops on the CPU.
  virtual bool graph_replay(uint64_t /*key*/) { return false; }
  virtual void graph_begin(uint64_t /*key*/) {}
  virtual void graph_end(uint64_t /*key*/) {}
  virtual void graph_forget_all() {}  // called when a session's buffers are freed
  // ---- speculative verification steps (src/spec, docs/speculative.md) ----
  // The shape of the next step beyond set_step's chain; set_step resets it (a chain, decode_exact off).
  //   decode_exact: every row's results are bitwise those a one-row step (T = 1) at its position would give, so a
  //     verification step reproduces plain decoding exactly (CPU: attention one query row at a time, linear in GEMV
  //     blocks of <= 8 rows; CUDA: the decode attention kernel once per row, linear on the GEMV for any row count).
  //     Backends that cannot promise it ignore the flag.
  //   parent (only where supports_tree()): a token tree. parent[0] = -1, parent[t] in [0, t). Row t sits at position
  //     pos0 + depth(t) and attends to the cache positions < pos0 plus its ancestors and itself (SpecInfer's tree
  //     mask). The cache rows of positions >= pos0 are scratch after a tree step until kv_commit_tree() picks a
  //     root-to-node path. Tree steps are always decode-exact on the CPU.
  struct StepShape {
    std::span<const int32_t> parent;
    bool decode_exact = false;
  };
  virtual bool supports_tree() const { return false; }
  virtual void set_step_shape(const StepShape& shape);
  // After a tree step at pos0: the cache rows of positions pos0 + j take the keys/values the step computed for its
  // row rows[j] (j < rows.size(); rows is a root-to-node path of that step's tree). One call per layer.
  virtual void kv_commit_tree(const KVLayer& cache, int64_t pos0, std::span<const int32_t> rows);

  // Counters of backend-internal decisions, for tests and profiling (zeros where a backend has none).
  struct Stats {
    uint64_t residual_redirects = 0;  // CUDA: in-place residual updates written to the shadow buffer (ping-pong)
    uint64_t residual_copies = 0;     // CUDA: copies of the residual back home before another op touched it
    uint64_t quant_fused_adds = 0;    // CUDA: quantized GEMVs that also added their output to the residual
    uint64_t quant_fused_norms = 0;   // CUDA: quantized GEMVs that computed their input's RMSNorm themselves
    uint64_t quant_fused_gated = 0;   // CUDA: quantized gate|up GEMVs that applied the gated activation too
    uint64_t mamba_fused_convs = 0;   // CUDA: Mamba in_proj GEMVs that also ran the conv1d step (decode)
    uint64_t mamba_fused_mixers = 0;  // CUDA: Mamba x_proj + dt_proj + scan steps run as one kernel (decode)
    // The memory report (CUDA; zeros on the CPU, whose weights are mostly the mapped file): device bytes of the
    // loaded weights (matrices as stored: bf16, or the GGUF blocks as they are; biases and vectors f32), and of the
    // bf16 scratch quantized matrices are dequantized into for prefill GEMMs (allocated at load).
    uint64_t weight_bytes = 0;
    uint64_t dequant_scratch_bytes = 0;
    // CPU offload (configure_offload): layers whose matrices live in pinned host memory, those bytes, and the bytes
    // copied host -> device by the passes run eagerly or captured so far (a replayed graph copies again uncounted).
    uint64_t offloaded_layers = 0;
    uint64_t host_pinned_bytes = 0;
    uint64_t offload_bytes_copied = 0;
    // CUDA graphs (Model::graph_counts): steps captured, replayed, and run eagerly between graph_begin / graph_end.
    uint64_t graph_captures = 0;
    uint64_t graph_replays = 0;
    uint64_t graph_eager = 0;
  };
  virtual Stats stats() const { return {}; }

  // ---- CPU offload of decoder-layer weights (docs/serving.md "CPU offload"). Default: Status::unsupported ----
  // The matrices that load_matrix() receives while set_layer(l) names a layer in [first_offloaded, layers) are kept
  // in pinned host memory; every forward pass streams them into `slots` device buffers of slot_bytes each (layer i
  // of the offloaded ones into slot i % slots), on a copy stream overlapped with the compute of the layers before.
  // Called once, before any load_matrix. Matrices as stored must fit slot_bytes (the plan: engine/offload_plan.hpp).
  struct OffloadLayout {
    int64_t layers = 0, first_offloaded = 0;
    int slots = 0;
    int64_t slot_bytes = 0;
  };
  virtual bool supports_offload() const { return false; }
  virtual void configure_offload(const OffloadLayout& layout);
  // The decoder layer that the following load_matrix calls and ops belong to (-1: none: embeddings, final norm,
  // lm_head). The model sets it at every layer of every pass; backends without offload ignore it.
  virtual void set_layer(int64_t /*layer*/) {}

  // ---- ops (T = rows of the current step; all read positions / tokens from the step buffer) ----
  // out[t, :] = table[token_t, :] * scale
  virtual void embed(const Matrix& table, const Tensor& out, int64_t T, float scale) = 0;
  // out = rms_norm(x) * w per group of `group` columns (x.cols % group == 0); out may alias x.
  virtual void rms_norm(const Tensor& x, const Tensor& w, const Tensor& out, int64_t T, int64_t group,
                        float eps) = 0;
  // residual += rms_norm(x) * w  (Gemma's post-attention / post-feedforward norms fused with the residual add).
  virtual void add_rms_norm(const Tensor& x, const Tensor& w, const Tensor& residual, int64_t T, float eps) = 0;
  // out[T, W.rows] = x[T, W.cols] . W^T (+ bias). GEMV for small T, GEMM otherwise.
  virtual void linear(const Tensor& x, const Matrix& W, const Tensor& out, int64_t T) = 0;
  // In place on x [T, heads * head_dim]; inv_freq f32 [1, head_dim / 2].
  virtual void rope(const Tensor& x, int64_t T, int64_t heads, int64_t head_dim, const Tensor& inv_freq,
                    float attn_scaling) = 0;
  // Appends k/v rows to the cache, then attention of q against the cache (see "attention()" above).
  // q/out [T, heads*head_dim], k/v [T, kv_heads*head_dim].
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const KVLayer& cache,
                         const Tensor& out, int64_t T, const AttentionParams& p) = 0;
  // out[T, F] = act(gu[:, :F]) * gu[:, F:2F]
  virtual void gated_act(const Tensor& gu, const Tensor& out, int64_t T, Activation act) = 0;
  // y += x
  virtual void add(const Tensor& x, const Tensor& y, int64_t T) = 0;
  // x = cap * tanh(x / cap)
  virtual void softcap(const Tensor& x, int64_t T, float cap) = 0;

  // ---- selective state-space (Mamba) layers, include/flashkit/ssm.hpp semantics. Default: Status::unsupported ----
  // Per sequence (one session): conv_state f32 [d_inner, width] (the last `width` inputs, newest last) and state f32
  // [d_inner, d_state] are updated in place; zeros at position 0. All tensors here are f32.
  virtual bool supports_ssm() const { return false; }
  // out[T, d_inner] = silu(bias + causal depthwise conv of x[T, d_inner] with w f32 [d_inner, width]); bias may be
  // empty. x and out are rows of one sequence in time order (they may be column slices).
  virtual void causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& conv_state,
                             const Tensor& out, int64_t T);
  // y = selective scan over T rows, delta_softplus on, no delta bias (dt_proj's bias is in delta already):
  // u, delta, z, y [T, d_inner]; B, C [T, d_state]; A f32 [d_inner, d_state] (= -exp(A_log)); D f32 [1, d_inner].
  virtual void selective_scan(const Tensor& u, const Tensor& delta, const Tensor& B, const Tensor& C, const Tensor& z,
                              const Tensor& A, const Tensor& D, const Tensor& state, const Tensor& y, int64_t T);

  // ---- batched paged steps (serving; see "Paged KV cache" above). Default: Status::unsupported ----
  virtual bool supports_paged() const { return false; }  // true: the three ops below are implemented
  // Bytes of the backend's device memory free now (a KV pool's default size is a fraction of it); -1: the backend
  // computes in host memory (the pool comes from the host's available memory).
  virtual int64_t free_memory_bytes() const { return -1; }
  // Rows of the step <= reserve_step's max_rows; replaces the set_step inputs until the next set_step.
  virtual void set_paged_step(const PagedStep& step);
  // Stores the step's k/v rows into the pool at their positions' slots, then each row attends over its sequence.
  virtual void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKVLayer& cache,
                               const Tensor& out, int64_t T, const AttentionParams& p);
  // out[i, :] = x[logit_rows[i], :] for i < n (n = the step's logit_rows count).
  virtual void gather_rows(const Tensor& x, const Tensor& out, int64_t n);
  // Greedy rows of a batched step: queues the argmax of each of the first n rows of `logits` (f32 [>= n, V]) with
  // argmax()'s rules, into a backend-owned buffer; argmax_rows_result() waits and downloads the n results (8 bytes
  // a row instead of the row). Backends without it (supports_argmax_rows() false) throw unsupported: the caller
  // downloads the logits instead.
  virtual bool supports_argmax_rows() const { return false; }
  virtual void argmax_rows(const Tensor& logits, int64_t n);
  virtual void argmax_rows_result(std::span<ArgmaxResult> out);

  // ---- tensor parallelism (engine/tp.hpp, docs/distributed.md, "Tensor-parallel inference") ----
  // x[0..T) (f32, the o_proj / down_proj output) = the sum over the ranks of comm of their x, every rank getting the
  // same sum. Default (backend_tp.cpp): synchronize() -- which also runs a queued, not yet launched op -- then the
  // communicator's all_reduce_sum on the buffer (host memory on the CPU; device memory on CUDA, which "threads" stages
  // through the host and NCCL reduces in place).
  virtual void all_reduce_sum(const Tensor& x, int64_t T, dist::Communicator& comm);

  // ---- greedy decoding without the logits download ----
  // Queues the argmax of `logits` (f32 [1, V], row 0) like any op (graph-safe: a captured decode step may end
  // with it); the result goes to a backend-owned slot that the next argmax() overwrites.
  virtual void argmax(const Tensor& logits) = 0;
  // The last argmax()'s result: waits for it and downloads a few bytes (a greedy step's one host sync).
  virtual ArgmaxResult argmax_result() = 0;
};

inline void Backend::set_step_shape(const StepShape& shape) {
  if (!shape.parent.empty()) fail(Status::unsupported, name() + ": tree verification steps are not supported");
}
inline void Backend::causal_conv1d(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t) {
  fail(Status::unsupported, name() + ": no selective state-space (Mamba) ops on this backend yet (use --device cpu)");
}
inline void Backend::selective_scan(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t) {
  fail(Status::unsupported, name() + ": no selective state-space (Mamba) ops on this backend yet (use --device cpu)");
}
inline void Backend::configure_offload(const OffloadLayout&) {
  fail(Status::unsupported, name() + ": weight offload (--offload-layers / --gpu-memory) needs the CUDA backend "
                            "(--device cuda); on the CPU the weights are in host memory already");
}
inline void Backend::kv_commit_tree(const KVLayer&, int64_t, std::span<const int32_t>) {
  fail(Status::unsupported, name() + ": tree verification steps are not supported");
}

// Factories. make_cuda_backend throws Status::unsupported in a build without CUDA (src/engine/cuda_stub).
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opts);
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opts);

}  // namespace flashkit::engine
