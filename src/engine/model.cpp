// The model engine: config + weights -> backend matrices, the decoder forward pass (the op schedule shared by
// every backend), sessions with their KV caches, and the generation loop.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "core/json_io.hpp"
#include "core/limits.hpp"
#include "core/tuning.hpp"
#include "dist/comm.hpp"
#include "engine/backend.hpp"
#include "engine/config.hpp"
#include "engine/offload_plan.hpp"
#include "engine/paged.hpp"
#include "engine/plain_step.hpp"
#include "engine/random_weights.hpp"
#include "engine/sampler.hpp"
#include "engine/tp.hpp"
#include "flashkit/engine.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"
#include "model/gguf.hpp"
#include "model/quant.hpp"
#include "model/weights.hpp"
#include "spec/speculative.hpp"

namespace flashkit {

namespace engine {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void bad(const std::string& m) { fail(Status::invalid_argument, m); }

struct LayerWeights {
  Tensor in_norm, post_attn_norm, pre_ff_norm, post_ff_norm, q_norm, k_norm;
  Matrix qkv, o, gate_up, down;
  // Mamba layers (Arch::mamba): in_norm, then the mixer in_proj -> conv1d -> x_proj -> dt_proj -> scan -> out_proj.
  Matrix in_proj, x_proj, dt_proj, out_proj;
  Tensor conv_w, conv_b, ssm_A, ssm_D;  // f32: conv [d_inner * width], A = -exp(A_log) [d_inner * d_state], D
  bool sliding = false;
  const Tensor* inv_freq = nullptr;
  float rope_scaling = 1.0f;
  AttentionParams ap;
};

class SessionImpl;

// What a speculative verification step asks of forward() beyond a prefill with all logits (src/spec): rows computed
// decode-exactly (Backend::StepShape) in f32 intermediates, the logits of every row inside the step (one CUDA graph
// per T), and optionally a token tree (parent; CPU backend).
struct VerifyStep {
  std::span<const int32_t> parent;  // empty: a chain
};

class ModelImpl final : public Model {
 public:
  // comm: rank comm->rank() of a tensor-parallel model of comm->size() ranks (engine/tp.hpp); nullptr: the whole model.
  ModelImpl(const std::filesystem::path& dir, const LoadOptions& opts, dist::Communicator* comm = nullptr);
  ~ModelImpl() override {
    if (!be_) return;
    for (auto& l : layers_) {
      for (Matrix* m : {&l.qkv, &l.o, &l.gate_up, &l.down, &l.in_proj, &l.x_proj, &l.dt_proj, &l.out_proj})
        be_->free_matrix(*m);
    }
    be_->free_matrix(embed_);
    if (!tied_) be_->free_matrix(lm_head_);
  }
  const ModelInfo& info() const override { return info_; }
  // Bytes one session allocates on the backend: the KV cache (max_context rows per layer, the window for ring
  // layers) and the step buffers of a prefill chunk.
  double session_bytes() const {
    const ModelConfig& c = cfg_;
    const double kv_es = double(dtype_size(be_->kv_dtype())), act_es = double(dtype_size(be_->activation_dtype()));
    double kv = 0;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const bool ring = c.layer_sliding[size_t(i)] && c.sliding_window < info_.max_context;
      kv += 2.0 * double(ring ? c.sliding_window : info_.max_context) * double(kv_dim_) * kv_es;
    }
    const double rows = double(std::max<int64_t>(1, std::min(opts_.prefill_chunk, info_.max_context)));
    const double act = rows * (2.0 * 4 * double(c.hidden_size) +
                               act_es * double(c.hidden_size + q_dim_ + 2 * kv_dim_ + q_dim_ + 3 * c.intermediate_size));
    return kv + act + 4.0 * double(c.vocab_size) * rows + mamba_session_bytes(rows);
  }
  // Mamba: per layer the conv and SSM states (O(1) in the context), per step row the mixer's intermediates.
  double mamba_session_bytes(double rows) const {
    if (cfg_.arch != Arch::mamba) return 0;
    const SsmConfig& m = cfg_.ssm;
    const double state = double(cfg_.num_layers) * double(m.d_inner) * double(m.conv_kernel + m.state_size);
    return 4.0 * (state + rows * double(6 * m.d_inner + m.dt_rank + 2 * m.state_size));
  }
  // Refuses, before allocating, a session that cannot fit in host memory (CPU backend; the limit of
  // max_workspace_bytes(tuning_): 80% of physical memory, or Tuning::max_workspace_bytes).
  void check_session_memory() const {
    if (be_->device() != Device::cpu) return;
    const double need = session_bytes(), limit = double(max_workspace_bytes(tuning_));
    if (need <= limit) return;
    char b[320];
    std::snprintf(b, sizeof b,
                  "a session of %lld tokens (max_context) needs %.3g GB for its KV cache and buffers, more than the "
                  "limit of %.3g GB (80%% of physical memory, or FLASHKIT_MAX_WORKSPACE_BYTES); use a smaller "
                  "max_context (--ctx)",
                  (long long)info_.max_context, need / 1e9, limit / 1e9);
    fail(Status::out_of_memory, b);
  }
  // CPU offload: sizes the layers from the config (bf16 matrices as the CUDA backend stores them), plans the
  // offloaded count (--offload-layers, or the fewest that fit --gpu-memory) and configures the backend, before any
  // weight is loaded.
  void plan_offload(const LoadOptions& opts, bool keep_quantized) {
    const ModelConfig& c = cfg_;
    if (c.arch == Arch::mamba) fail(Status::unsupported, "weight offload: not available for model_type mamba");
    if (keep_quantized)
      fail(Status::unsupported, "weight offload: not available for GGUF block-quantized weights (give --dtype bf16)");
    if (!be_->supports_offload()) be_->configure_offload({});  // throws the backend's reason
    const int64_t H = c.hidden_size, F = c.intermediate_size;
    const int64_t per_layer = 2 * ((q_dim_ + 2 * kv_dim_) * H + H * q_dim_ + 2 * F * H + H * F);
    std::vector<int64_t> layer_bytes(size_t(c.num_layers), per_layer);
    OffloadSizes sz;
    sz.layer_bytes = layer_bytes;
    const int64_t vec = 4 * H * (4 + c.num_layers * 4) + 4 * c.num_layers * (q_dim_ + 2 * kv_dim_ + H);
    sz.resident_bytes = 2 * c.vocab_size * H * (c.tie_embeddings ? 1 : 2) + vec;
    const double sess = session_bytes();
    double kv = 0;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const bool ring = c.layer_sliding[size_t(i)] && c.sliding_window < info_.max_context;
      kv += 2.0 * double(ring ? c.sliding_window : info_.max_context) * double(kv_dim_) * double(dtype_size(be_->kv_dtype()));
    }
    sz.kv_bytes = int64_t(kv);
    // The step buffers of a prefill chunk plus the backend's fixed workspaces (cuBLAS 32 MiB, scratch, CUDA context
    // allocations outside cudaMalloc are not counted: leave the driver its headroom in the budget).
    sz.workspace_bytes = int64_t(sess - kv) + (int64_t(64) << 20);
    const OffloadPlan plan = opts.gpu_memory_bytes > 0 ? plan_offload_budget(sz, opts.gpu_memory_bytes)
                                                       : plan_offload_layers(sz, opts.offload_layers);
    if (plan.offloaded_layers == 0) return;
    be_->configure_offload({c.num_layers, plan.first_offloaded, plan.slots, plan.slot_bytes});
  }
  std::unique_ptr<Session> new_session() override;
  OpTimes& op_times() override { return times_; }
  GraphCounts graph_counts() const override {
    const Backend::Stats st = be_->stats();
    return {int64_t(st.graph_captures), int64_t(st.graph_replays), int64_t(st.graph_eager)};
  }

  // One forward pass of T = tokens.size() rows at positions pos0...; logits rows written to `logits_out`
  // ([T, vocab] when all_logits, else the last row only). With `greedy` (last row only), the backend reduces the
  // row to its argmax instead and only that crosses to the host; the row stays in the session's device buffer.
  void forward(SessionImpl& s, std::span<const int32_t> tokens, int64_t pos0, bool all_logits, float* logits_out,
               ArgmaxResult* greedy = nullptr, const VerifyStep* verify = nullptr);

  template <typename F>
  void op(const char* name, F&& f) {
    if (!opts_.profile) {
      f();
      return;
    }
    auto t0 = Clock::now();
    f();
    be_->synchronize();
    const double dur = std::chrono::duration<double>(Clock::now() - t0).count();
    times_.seconds[name] += dur;
    times_.calls[name] += 1;
    if (times_.events.size() < OpTimes::kMaxEvents)
      times_.events.push_back({name, std::chrono::duration<double>(t0 - loaded_).count(), dur});
    else
      ++times_.dropped;
  }

  // Sessions share the backend's step buffers, op timers and (CUDA) graphs: one session call runs at a time.
  // Taken by every SessionImpl entry point that touches the backend (engine.hpp, "Threads").
  mutable std::mutex mu_;
  Clock::time_point loaded_ = Clock::now();  // the profile trace's time origin
  ModelConfig cfg_;
  LoadOptions opts_;
  Tuning tuning_;  // opts_.tuning or the process default, resolved once at load
  ModelInfo info_;
  std::unique_ptr<model::WeightStore> store_;
  std::unique_ptr<Backend> be_;
  std::vector<LayerWeights> layers_;
  Tensor final_norm_, inv_global_, inv_local_;
  Matrix embed_, lm_head_;
  bool tied_ = false;
  float embed_scale_ = 1.0f;
  int64_t q_dim_ = 0, kv_dim_ = 0, logit_rows_ = 1;
  uint64_t next_session_ = 1;
  OpTimes times_;
  // Tensor parallelism: the communicator whose all-reduce sums the ranks' o_proj / down_proj outputs (nullptr: one
  // rank), and the column slices of o_proj / down_proj copied at load (kept while the backend may point into them).
  dist::Communicator* comm_ = nullptr;
  std::vector<std::vector<char>> tp_slices_;
};

// The intermediates of one step (everything but the residual stream and the o/down output added to it).
struct Acts {
  Tensor xn, qkv, attn, gu, act;
};

// A Mamba session's per-layer recurrent state (replaces the KV cache: O(1) in the context) and the mixer's step
// intermediates (f32, C_ rows).
struct MambaState {
  std::vector<Tensor> conv, ssm;  // per layer: [d_inner, conv_kernel], [d_inner, state_size]
  Tensor xz, xc, dbc, dt, y;      // [T, 2 d_inner], [T, d_inner], [T, dt_rank + 2 d_state], [T, d_inner], [T, d_inner]
};

class SessionImpl final : public Session, public DeviceGreedy {
 public:
  SessionImpl(ModelImpl& m, uint64_t id) : m_(m), id_(id) {
    m.check_session_memory();
    const std::lock_guard<std::mutex> lock(m.mu_);
    Backend& be = *m.be_;
    const ModelConfig& c = m.cfg_;
    C_ = std::max<int64_t>(1, std::min(m.opts_.prefill_chunk, m.info_.max_context));
    be.reserve_step(C_);
    h_ = be.alloc(DType::f32, C_, c.hidden_size);
    o_ = be.alloc(DType::f32, C_, c.hidden_size);
    // Multi-row steps keep their intermediates in the backend's activation dtype; one-row steps (decode) in f32
    // (backend.hpp, "Memory model"): a separate one-row set when the two differ.
    const DType adt = be.activation_dtype();
    wide_ = alloc_acts(adt, C_);
    one_ = adt == DType::f32 ? wide_ : alloc_acts(DType::f32, 1);
    logits_dev_ = be.alloc(DType::f32, m.logit_rows_, c.vocab_size);
    // Speculative decoding: sliding-window rings keep kv_ring_slack rows beyond the window (rollback, see
    // backend.hpp "KV cache"); verification steps use f32 intermediates like decode steps (verify_).
    const int64_t slack = m.opts_.kv_ring_slack;
    verify_rows_ = std::min<int64_t>(C_, std::max<int64_t>(64, slack + 1));
    verify_ = adt == DType::f32 ? wide_ : alloc_acts(DType::f32, verify_rows_);
    if (c.arch == Arch::mamba) alloc_mamba();
    for (auto& l : m.layers_) {
      if (c.arch == Arch::mamba) break;  // no KV cache: MambaState
      KVLayer kv;
      kv.ring = l.sliding && c.sliding_window + slack < m.info_.max_context;
      kv.capacity = kv.ring ? c.sliding_window + slack : m.info_.max_context;
      if (kv.ring) ring_window_ = c.sliding_window, ring_capacity_ = kv.capacity;
      kv.k = be.alloc(be.kv_dtype(), kv.capacity, m.kv_dim_);
      kv.v = be.alloc(be.kv_dtype(), kv.capacity, m.kv_dim_);
      be.zero(kv.k);
      be.zero(kv.v);
      kv_.push_back(kv);
    }
    last_.assign(size_t(c.vocab_size), 0.f);
  }
  ~SessionImpl() override {
    const std::lock_guard<std::mutex> lock(m_.mu_);
    Backend& be = *m_.be_;
    be.graph_forget_all();
    const bool shared = one_.xn.data == wide_.xn.data;
    for (Acts* a : {&wide_, &one_}) {
      if (a == &one_ && shared) break;
      for (Tensor* t : {&a->xn, &a->qkv, &a->attn, &a->gu, &a->act}) be.free(*t);
    }
    if (verify_.xn.data != wide_.xn.data)
      for (Tensor* t : {&verify_.xn, &verify_.qkv, &verify_.attn, &verify_.gu, &verify_.act}) be.free(*t);
    for (Tensor* t : {&h_, &o_, &logits_dev_}) be.free(*t);
    for (auto& kv : kv_) {
      be.free(kv.k);
      be.free(kv.v);
    }
    for (auto* v : {&mamba_.conv, &mamba_.ssm})
      for (Tensor& t : *v) be.free(t);
    for (Tensor* t : {&mamba_.xz, &mamba_.xc, &mamba_.dbc, &mamba_.dt, &mamba_.y}) be.free(*t);
  }
  void alloc_mamba() {
    Backend& be = *m_.be_;
    const SsmConfig& sc = m_.cfg_.ssm;
    for (int64_t i = 0; i < m_.cfg_.num_layers; ++i) {
      mamba_.conv.push_back(be.alloc(DType::f32, sc.d_inner, sc.conv_kernel));
      mamba_.ssm.push_back(be.alloc(DType::f32, sc.d_inner, sc.state_size));
    }
    mamba_.xz = be.alloc(DType::f32, C_, 2 * sc.d_inner);
    mamba_.xc = be.alloc(DType::f32, C_, sc.d_inner);
    mamba_.dbc = be.alloc(DType::f32, C_, sc.dt_rank + 2 * sc.state_size);
    mamba_.dt = be.alloc(DType::f32, C_, sc.d_inner);
    mamba_.y = be.alloc(DType::f32, C_, sc.d_inner);
    zero_mamba_state();
  }
  void zero_mamba_state() {
    for (auto* v : {&mamba_.conv, &mamba_.ssm})
      for (Tensor& t : *v) m_.be_->zero(t);
  }
  Acts alloc_acts(DType dt, int64_t rows) {
    Backend& be = *m_.be_;
    const ModelConfig& c = m_.cfg_;
    Acts a;
    a.xn = be.alloc(dt, rows, c.hidden_size);
    a.qkv = be.alloc(dt, rows, m_.q_dim_ + 2 * m_.kv_dim_);
    a.attn = be.alloc(dt, rows, m_.q_dim_);
    a.gu = be.alloc(dt, rows, 2 * c.intermediate_size);
    a.act = be.alloc(dt, rows, c.intermediate_size);
    return a;
  }
  const Acts& acts(int64_t T) const { return T == 1 ? one_ : wide_; }

  void prefill(std::span<const int32_t> tokens, bool all_logits) override {
    check(tokens);
    const std::lock_guard<std::mutex> lock(m_.mu_);
    const int64_t V = m_.cfg_.vocab_size, n = int64_t(tokens.size());
    if (all_logits) all_.assign(size_t(n * V), 0.f);
    for (int64_t s = 0; s < n; s += C_) {
      const int64_t T = std::min(C_, n - s);
      float* dst = all_logits ? all_.data() + s * V : last_.data();
      m_.forward(*this, tokens.subspan(size_t(s), size_t(T)), pos_, all_logits, dst);
      pos_ += T;
      note_written(pos_ - 1);
    }
    tree_.active = false;  // a pending tree step is discarded
    if (all_logits) std::memcpy(last_.data(), all_.data() + (n - 1) * V, size_t(V) * 4);
    last_on_device_ = false;
  }
  void decode(int32_t token) override { prefill(std::span<const int32_t>(&token, 1), false); }
  // A decode step whose logits stay on the device: only their argmax is downloaded (generate()'s greedy path).
  // logits() downloads the row if it is asked for.
  bool device_argmax_allowed() const override { return m_.tuning_.device_argmax; }
  ArgmaxResult decode_argmax(int32_t token) override {
    check(std::span<const int32_t>(&token, 1));
    const std::lock_guard<std::mutex> lock(m_.mu_);
    ArgmaxResult r;
    m_.forward(*this, std::span<const int32_t>(&token, 1), pos_, false, nullptr, &r);
    pos_ += 1;
    note_written(pos_ - 1);
    tree_.active = false;
    last_on_device_ = true;
    return r;
  }
  std::span<const float> logits() const override {
    if (last_on_device_) {
      const std::lock_guard<std::mutex> lock(m_.mu_);
      m_.be_->download_f32(last_.data(), logits_dev_.row_slice(0, 1), 1);
      last_on_device_ = false;
    }
    return last_;
  }
  void check(std::span<const int32_t> tokens) const {
    const int64_t n = int64_t(tokens.size());
    if (n == 0) bad("prefill: no tokens");
    if (pos_ + n > m_.info_.max_context)
      bad("prompt of " + std::to_string(n) + " tokens" +
          (pos_ ? " (after " + std::to_string(pos_) + " tokens already in the context)" : std::string()) +
          " does not fit the context of " + std::to_string(m_.info_.max_context) +
          " tokens (max_context; the model allows " + std::to_string(m_.cfg_.max_position) + ")");
    for (int64_t i = 0; i < n; ++i)
      if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= m_.cfg_.vocab_size)
        bad("token id " + std::to_string(tokens[size_t(i)]) + " at index " + std::to_string(i) +
            " is outside the vocabulary [0, " + std::to_string(m_.cfg_.vocab_size) + ")");
  }
  const std::vector<float>& all_logits() const override { return all_; }
  int64_t position() const override { return pos_; }
  int64_t max_context() const override { return m_.info_.max_context; }
  void reset() override {
    if (!mamba_.conv.empty()) {
      const std::lock_guard<std::mutex> lock(m_.mu_);
      zero_mamba_state();
    }
    pos_ = 0;
    ring_floor_ = 0;
    tree_.active = false;
  }
  const Model& model() const override { return m_; }

  // ---------------------------------------------------------------- speculative decoding (src/spec)
  // Rollback is O(1): positions >= new_length are forgotten (their rows are overwritten by the next steps). Global
  // layers keep every row; a ring keeps the last `capacity` positions written, so rolling back to n needs the rows
  // of (n - window, n) still there: ring_floor_ is the oldest position every ring still holds.
  void note_written(int64_t last_pos) {
    if (ring_capacity_ > 0) ring_floor_ = std::max(ring_floor_, last_pos - ring_capacity_ + 1);
  }
  int64_t oldest_rollback_target() const {
    if (ring_capacity_ == 0 || ring_floor_ == 0) return 0;
    return ring_floor_ + ring_window_ - 1;
  }
  void truncate(int64_t new_length) override {
    if (new_length < 0 || new_length > pos_)
      bad("truncate: new_length " + std::to_string(new_length) + " is outside [0, position() = " +
          std::to_string(pos_) + "]");
    if (m_.cfg_.arch == Arch::mamba && new_length != pos_) {
      if (new_length != 0)
        fail(Status::unsupported, "truncate: a mamba session keeps one recurrent state, not a per-token cache: it "
                                  "cannot roll back to " + std::to_string(new_length) + " of " + std::to_string(pos_) +
                                  " tokens (only to 0, i.e. reset(); speculative decoding is not available)");
      reset();
      return;
    }
    if (new_length > 0 && new_length < oldest_rollback_target())
      bad("truncate: cannot roll back to " + std::to_string(new_length) + " tokens: the sliding-window layers " +
          "keep the last " + std::to_string(ring_capacity_) + " positions (window " + std::to_string(ring_window_) +
          " + kv_ring_slack " + std::to_string(ring_capacity_ - ring_window_) + "), so the oldest reachable length is " +
          std::to_string(oldest_rollback_target()));
    if (new_length == 0) ring_floor_ = 0;
    pos_ = new_length;
    tree_.active = false;
  }
  int64_t max_verify_rows() const override {
    // Asked by speculative decoding before it starts: refuse there rather than at the first rejected draft token.
    if (m_.cfg_.arch == Arch::mamba)
      fail(Status::unsupported, "speculative decoding: a mamba session keeps one recurrent state and cannot roll back "
                                "rejected tokens (generate without --draft / --lookup)");
    return std::min<int64_t>(verify_rows_, ring_capacity_ > 0 ? ring_capacity_ - ring_window_ + 1 : verify_rows_);
  }
  void forward_all_logits(std::span<const int32_t> tokens) override {
    check(tokens);
    const int64_t V = m_.cfg_.vocab_size, n = int64_t(tokens.size());
    all_.assign(size_t(n * V), 0.f);
    const VerifyStep vs;
    for (int64_t s = 0; s < n; s += verify_rows_) {
      const int64_t T = std::min(verify_rows_, n - s);
      m_.forward(*this, tokens.subspan(size_t(s), size_t(T)), pos_, true, all_.data() + s * V, nullptr, &vs);
      pos_ += T;
      note_written(pos_ - 1);
    }
    std::memcpy(last_.data(), all_.data() + (n - 1) * V, size_t(V) * 4);
    last_on_device_ = false;
    tree_.active = false;
  }
  bool supports_tree() const override { return m_.cfg_.arch != Arch::mamba && m_.be_->supports_tree(); }
  void forward_tree(std::span<const int32_t> tokens, std::span<const int32_t> parents) override {
    check(tokens);
    const int64_t n = int64_t(tokens.size()), V = m_.cfg_.vocab_size;
    if (!supports_tree())
      fail(Status::unsupported, "forward_tree: the " + m_.be_->name() + " backend has no tree verification");
    if (int64_t(parents.size()) != n)
      bad("forward_tree: parents has " + std::to_string(parents.size()) + " entries, expected one per token (" +
          std::to_string(n) + ")");
    if (n > verify_rows_)
      bad("forward_tree: " + std::to_string(n) + " nodes, at most " + std::to_string(verify_rows_) + " per step");
    std::vector<int32_t> depth(size_t(n), 0);
    for (int64_t t = 0; t < n; ++t) {
      const int32_t pa = parents[size_t(t)];
      if (t == 0 ? pa != -1 : (pa < 0 || pa >= t))
        bad("forward_tree: parents[" + std::to_string(t) + "] = " + std::to_string(pa) +
            (t == 0 ? ", expected -1 (row 0 is the root)" : ", expected a row in [0, " + std::to_string(t) + ")"));
      if (t > 0) depth[size_t(t)] = depth[size_t(pa)] + 1;
    }
    const int64_t D = *std::max_element(depth.begin(), depth.end());
    if (pos_ + D + 1 > m_.info_.max_context)
      bad("forward_tree: a tree of depth " + std::to_string(D) + " at position " + std::to_string(pos_) +
          " does not fit the context of " + std::to_string(m_.info_.max_context) + " tokens");
    all_.assign(size_t(n * V), 0.f);
    VerifyStep vs;
    vs.parent = parents;
    m_.forward(*this, tokens, pos_, true, all_.data(), nullptr, &vs);
    note_written(pos_ + D);
    tree_.active = true;
    tree_.pos0 = pos_;
    tree_.parent.assign(parents.begin(), parents.end());
    std::memcpy(last_.data(), all_.data() + (n - 1) * V, size_t(V) * 4);
    last_on_device_ = false;
  }
  void accept_tree_path(std::span<const int32_t> nodes) override {
    if (!tree_.active) bad("accept_tree_path: no tree step to accept (call forward_tree first)");
    if (nodes.empty() || nodes[0] != 0) bad("accept_tree_path: the path must start at the root (node 0)");
    for (size_t j = 1; j < nodes.size(); ++j)
      if (nodes[j] <= 0 || size_t(nodes[j]) >= tree_.parent.size() || tree_.parent[size_t(nodes[j])] != nodes[j - 1])
        bad("accept_tree_path: nodes[" + std::to_string(j) + "] = " + std::to_string(nodes[j]) +
            " is not a child of nodes[" + std::to_string(j - 1) + "]");
    for (auto& kv : kv_) m_.be_->kv_commit_tree(kv, tree_.pos0, nodes);
    pos_ = tree_.pos0 + int64_t(nodes.size());
    tree_.active = false;
  }

  ModelImpl& m_;
  std::shared_ptr<ModelImpl> keep_;
  uint64_t id_;
  int64_t C_ = 1, pos_ = 0;
  Tensor h_, o_, logits_dev_;
  Acts wide_, one_;  // one_ is wide_ when the activation dtype is f32
  std::vector<KVLayer> kv_;
  MambaState mamba_;  // Arch::mamba: the recurrent state instead of kv_
  // Speculative decoding: f32 intermediates of verification steps (verify_rows_ rows; wide_ on f32 backends), the
  // rings' geometry (0: no ring layer) and the oldest position they all still hold, the pending tree step.
  Acts verify_;
  int64_t verify_rows_ = 1, ring_window_ = 0, ring_capacity_ = 0, ring_floor_ = 0;
  struct {
    bool active = false;
    int64_t pos0 = 0;
    std::vector<int32_t> parent;
  } tree_;
  // last_ is the last row's logits; after decode_argmax the row is still only on the device (logits_dev_ row 0)
  // and logits() downloads it on first use.
  mutable std::vector<float> last_;
  mutable bool last_on_device_ = false;
  std::vector<float> all_;
};

std::unique_ptr<Session> ModelImpl::new_session() {
  auto s = std::make_unique<SessionImpl>(*this, next_session_++);
  // A session keeps its model (weights, backend) alive, whatever the caller does with the Model pointer.
  s->keep_ = std::static_pointer_cast<ModelImpl>(shared_from_this());
  return s;
}

void ModelImpl::forward(SessionImpl& s, std::span<const int32_t> tokens, int64_t pos0, bool all_logits,
                        float* logits_out, ArgmaxResult* greedy, const VerifyStep* verify) {
  Backend& be = *be_;
  const ModelConfig& c = cfg_;
  const int64_t T = int64_t(tokens.size());
  const float eps = float(c.rms_norm_eps);
  if (greedy && all_logits) fail(Status::internal, "forward: greedy needs last-row logits");
  be.set_step(tokens, pos0);
  // Speculative verification (VerifyStep): decode-exact rows, f32 intermediates, every row's logits in the step.
  // FLASHKIT_SPEC_EXACT=0: chains verified by the multi-row kernels instead (A/B runs; greedy output may then differ
  // from plain decoding at near ties).
  if (verify) be.set_step_shape({verify->parent, tuning_.spec_exact});
  const bool logits_in_step = verify && all_logits && T <= logit_rows_;
  // Decode steps (T == 1, last-row logits) are graph-replayable: identical ops and arguments every step. A one-row
  // chunk asking for all logits runs a different op sequence, so it never captures or replays the decode graph; a
  // greedy step (ending in argmax) is a third sequence with its own key. Profiling needs per-op syncs.
  // A chain verification step of T rows is a sequence of its own: one graph per (session, T), captured where the
  // backend can (CUDA: not while its multi-row attention reads the KV length from the host; it then runs eagerly).
  const bool verify_graph = logits_in_step && verify->parent.empty() && T < 128;
  // Tensor-parallel steps all-reduce through the communicator between ops, which a captured graph cannot replay.
  const bool graphable = ((T == 1 && !all_logits) || verify_graph) && !opts_.profile && !comm_;
  const uint64_t key = (s.id_ << 8) | (verify_graph ? 0x80u | uint64_t(T) : (greedy ? 2u : 1u));
  const bool replayed = graphable && be.graph_replay(key);
  const Acts& A = verify && T <= s.verify_rows_ ? s.verify_ : s.acts(T);
  if (!replayed) {
    if (graphable) be.graph_begin(key);
    const Tensor h = s.h_, xn = A.xn, qkv = A.qkv, attn = A.attn, o = s.o_, gu = A.gu, act = A.act;
    const Tensor q = qkv.col_slice(0, q_dim_), k = qkv.col_slice(q_dim_, kv_dim_),
                 v = qkv.col_slice(q_dim_ + kv_dim_, kv_dim_);
    const Activation actk = c.activation == "silu" ? Activation::silu : Activation::gelu_tanh;
    op("embed", [&] { be.embed(embed_, h, T, embed_scale_); });
    for (size_t li = 0; li < layers_.size(); ++li) {
      const LayerWeights& L = layers_[li];
      be.set_layer(int64_t(li));  // (offload: the layer whose streamed weights the ops below read)
      op("rms_norm", [&] { be.rms_norm(h, L.in_norm, xn, T, c.hidden_size, eps); });
      if (c.arch == Arch::mamba) {  // the mixer, then the residual add (transformers' MambaBlock)
        const MambaState& ms = s.mamba_;
        const int64_t Di = c.ssm.d_inner, R = c.ssm.dt_rank, N = c.ssm.state_size;
        const Tensor x = ms.xz.col_slice(0, Di), z = ms.xz.col_slice(Di, Di);
        const Tensor dtl = ms.dbc.col_slice(0, R), Bm = ms.dbc.col_slice(R, N), Cm = ms.dbc.col_slice(R + N, N);
        op("linear.in_proj", [&] { be.linear(xn, L.in_proj, ms.xz, T); });
        op("ssm.conv1d", [&] { be.causal_conv1d(x, L.conv_w, L.conv_b, ms.conv[li], ms.xc, T); });
        op("linear.x_proj", [&] { be.linear(ms.xc, L.x_proj, ms.dbc, T); });
        op("linear.dt_proj", [&] { be.linear(dtl, L.dt_proj, ms.dt, T); });
        op("ssm.scan", [&] { be.selective_scan(ms.xc, ms.dt, Bm, Cm, z, L.ssm_A, L.ssm_D, ms.ssm[li], ms.y, T); });
        op("linear.out_proj", [&] { be.linear(ms.y, L.out_proj, o, T); });
        op("add", [&] { be.add(o, h, T); });
        continue;
      }
      op("linear.qkv", [&] { be.linear(xn, L.qkv, qkv, T); });
      if (c.qk_norm) {
        op("rms_norm.qk", [&] {
          be.rms_norm(q, L.q_norm, q, T, c.head_dim, eps);
          be.rms_norm(k, L.k_norm, k, T, c.head_dim, eps);
        });
      }
      op("rope", [&] {
        be.rope(q, T, c.num_heads, c.head_dim, *L.inv_freq, L.rope_scaling);
        be.rope(k, T, c.num_kv_heads, c.head_dim, *L.inv_freq, L.rope_scaling);
      });
      op("attention", [&] { be.attention(q, k, v, s.kv_[li], attn, T, L.ap); });
      op("linear.o", [&] { be.linear(attn, L.o, o, T); });
      if (comm_) op("all_reduce", [&] { be.all_reduce_sum(o, T, *comm_); });
      if (c.sandwich_norms) {
        op("rms_norm", [&] { be.add_rms_norm(o, L.post_attn_norm, h, T, eps); });
        op("rms_norm", [&] { be.rms_norm(h, L.pre_ff_norm, xn, T, c.hidden_size, eps); });
      } else {
        op("add", [&] { be.add(o, h, T); });
        op("rms_norm", [&] { be.rms_norm(h, L.post_attn_norm, xn, T, c.hidden_size, eps); });
      }
      op("linear.gate_up", [&] { be.linear(xn, L.gate_up, gu, T); });
      op("gated_act", [&] { be.gated_act(gu, act, T, actk); });
      op("linear.down", [&] { be.linear(act, L.down, o, T); });
      if (comm_) op("all_reduce", [&] { be.all_reduce_sum(o, T, *comm_); });
      if (c.sandwich_norms) op("rms_norm", [&] { be.add_rms_norm(o, L.post_ff_norm, h, T, eps); });
      else op("add", [&] { be.add(o, h, T); });
    }
    be.set_layer(-1);
    if (!all_logits) {
      const Tensor hl = h.row_slice(T - 1, 1), xl = xn.row_slice(T - 1, 1);
      const Tensor lg = s.logits_dev_.row_slice(0, 1);
      op("rms_norm", [&] { be.rms_norm(hl, final_norm_, xl, 1, c.hidden_size, eps); });
      op("linear.lm_head", [&] { be.linear(xl, lm_head_, lg, 1); });
      if (c.final_softcap > 0) op("softcap", [&] { be.softcap(lg, 1, float(c.final_softcap)); });
      if (greedy) op("argmax", [&] { be.argmax(lg); });
    }
    if (logits_in_step) {
      const Tensor lg = s.logits_dev_.row_slice(0, T);
      op("rms_norm", [&] { be.rms_norm(h, final_norm_, xn, T, c.hidden_size, eps); });
      op("linear.lm_head", [&] { be.linear(xn, lm_head_, lg, T); });
      if (c.final_softcap > 0) op("softcap", [&] { be.softcap(lg, T, float(c.final_softcap)); });
    }
    if (graphable) be.graph_end(key);
  }
  if (logits_in_step) {
    op("logits.download", [&] { be.download_f32(logits_out, s.logits_dev_.row_slice(0, T), T); });
    return;
  }
  if (greedy) {
    op("argmax.download", [&] { *greedy = be.argmax_result(); });
    return;
  }
  if (!all_logits) {
    op("logits.download", [&] { be.download_f32(logits_out, s.logits_dev_.row_slice(0, 1), 1); });
    return;
  }
  for (int64_t r0 = 0; r0 < T; r0 += logit_rows_) {
    const int64_t R = std::min(logit_rows_, T - r0);
    const Tensor hl = s.h_.row_slice(r0, R), xl = A.xn.row_slice(r0, R);
    const Tensor lg = s.logits_dev_.row_slice(0, R);
    op("rms_norm", [&] { be.rms_norm(hl, final_norm_, xl, R, c.hidden_size, eps); });
    op("linear.lm_head", [&] { be.linear(xl, lm_head_, lg, R); });
    if (c.final_softcap > 0) op("softcap", [&] { be.softcap(lg, R, float(c.final_softcap)); });
    op("logits.download", [&] { be.download_f32(logits_out + r0 * c.vocab_size, lg, R); });
  }
}

bool parse_weight_dtype(const std::string& s, std::string* norm) {
  if (s == "auto") *norm = "auto";
  else if (s == "f32" || s == "float32" || s == "fp32") *norm = "f32";
  else if (s == "bf16" || s == "bfloat16") *norm = "bf16";
  else if (s == "f16" || s == "float16" || s == "fp16" || s == "half") *norm = "f16";
  else if (s == "q8_0" || s == "q8") *norm = "q8_0";
  else return false;
  return true;
}

ModelImpl::ModelImpl(const std::filesystem::path& dir, const LoadOptions& opts, dist::Communicator* comm)
    : opts_(opts), tuning_(resolve_tuning(opts.tuning)), comm_(comm && comm->size() > 1 ? comm : nullptr) {
  namespace fs = std::filesystem;
  std::string dt;
  if (!parse_weight_dtype(opts.dtype, &dt))
    bad("unknown dtype \"" + opts.dtype + "\" (expected auto, f32, bf16, f16 or q8_0)");
  if (opts.max_context < 0) bad("max_context must be >= 0 (0: the model's default), got " + std::to_string(opts.max_context));
  if (opts.prefill_chunk <= 0) bad("prefill_chunk must be positive, got " + std::to_string(opts.prefill_chunk));
  check_threads(opts.threads, "threads");
  if (opts.offload_layers < 0)
    bad("offload_layers (--offload-layers) must be >= 0, got " + std::to_string(opts.offload_layers));
  if (opts.gpu_memory_bytes < 0)
    bad("gpu_memory_bytes (--gpu-memory) must be >= 0, got " + std::to_string(opts.gpu_memory_bytes));
  if (opts.offload_layers > 0 && opts.gpu_memory_bytes > 0)
    bad("give --offload-layers or --gpu-memory, not both (--gpu-memory picks the number of offloaded layers)");
  if (opts.kv_ring_slack < 0 || opts.kv_ring_slack > 1024)
    bad("kv_ring_slack must be in [0, 1024], got " + std::to_string(opts.kv_ring_slack));
  std::error_code ec;
  if (!fs::exists(dir, ec)) bad(dir.string() + ": no such model directory");
  // A .gguf file carries its config in its metadata (model/gguf.hpp builds an HF-style config.json from it).
  const bool gguf = dir.extension() == ".gguf";
  if (gguf && !opts.random_weights) {
    model::Checkpoint ck = model::open_checkpoint(dir);
    try {
      cfg_ = parse_config(ck.config, dir.string());
    } catch (const nlohmann::json::exception& e) {
      bad(dir.string() + ": " + e.what());
    }
    store_ = std::move(ck.weights);
  } else if (gguf) {
    bad(dir.string() + ": --random-weights needs a config.json (or a model directory), not a .gguf file");
  } else {
    cfg_ = load_config(dir);
  }
  const ModelConfig& c = cfg_;
  // A tensor-parallel rank holds its shard's heads and MLP columns (engine/tp.hpp); planned before anything is loaded
  // so that a config that does not split is refused first. The checkpoint's tensors keep the whole model's shapes
  // (full_q, full_kv, F) and are sliced as they are loaded.
  const TpShard sh = comm_ ? plan_tp_shard(c, comm_->size(), comm_->rank()) : plan_tp_shard(c, 1, 0);
  if (c.arch == Arch::mamba && opts.random_weights)
    bad("--random-weights: not available for model_type mamba (give a checkpoint directory)");

  // Device first: a CUDA request in a CPU build fails before any weight is touched.
  BackendOptions bo;
  bo.threads = opts.threads;
  bo.tuning = tuning_;
  const std::string& d = opts.device;
  bool cuda = false;
  if (d == "cpu") {
  } else if (d == "cuda" || d.rfind("cuda:", 0) == 0) {
    cuda = true;
    if (d.size() > 5) {  // cuda:N, N a small non-negative integer written as one ("cuda:1x" is not cuda:1)
      const std::string n = d.substr(5);
      if (n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos)
        bad("device \"" + d + "\": expected cpu, cuda or cuda:N");
      bo.device_index = std::stoi(n);
    }
  } else {
    bad("unknown device \"" + d + "\" (expected cpu, cuda or cuda:N)");
  }
  if (!cuda && (opts.offload_layers > 0 || opts.gpu_memory_bytes > 0))
    bad(std::string(opts.offload_layers > 0 ? "--offload-layers" : "--gpu-memory") +
        " needs --device cuda (weight offload streams host memory to a GPU; on the CPU the weights are in host "
        "memory already)");

  using model::WeightType;
  if (dt == "q8_0" && opts.random_weights) bad("dtype q8_0 needs a GGUF checkpoint with Q8_0 tensors, not --random-weights");
  if (opts.random_weights) {
    WeightType rt = (dt == "f32") ? WeightType::f32 : (dt == "f16" ? WeightType::f16 : WeightType::bf16);
    if (dt == "auto") rt = c.torch_dtype == "float32" ? WeightType::f32 : WeightType::bf16;
    // Before any allocation: the random store plus the CPU backend's converted copy (f32 unless bf16 / f16).
    const int64_t backend_bytes = cuda ? 0 : (dt == "f32" || (dt == "auto" && rt == WeightType::f32)) ? 4 : 2;
    check_fits_host_memory(c, (rt == WeightType::f32 ? 4 : 2) + backend_bytes, "--random-weights");
    store_ = make_random_weights(c, rt, opts.random_seed);
  } else if (!store_) {
    store_ = model::open_safetensors(fs::is_directory(dir, ec) ? dir : dir.parent_path());
  }
  const std::string src = store_->source();
  auto get = [&](const std::string& name, std::vector<int64_t> shape) -> const model::WeightView& {
    const model::WeightView* w = store_->find(name);
    if (!w) bad(src + ": missing tensor \"" + name + "\" (needed by " + c.model_type + ")");
    if (w->shape != shape) {
      std::string want, got;
      for (auto x : shape) want += (want.empty() ? "" : ", ") + std::to_string(x);
      for (auto x : w->shape) got += (got.empty() ? "" : ", ") + std::to_string(x);
      bad(src + ": tensor \"" + name + "\" has shape [" + got + "], expected [" + want + "] from config.json");
    }
    if (opts.check_weights) model::check_finite(*w, src);
    return *w;
  };
  // Prefix: text-only checkpoints use "model.", multimodal Gemma 3 "language_model.model." (v4) or
  // "model.language_model." (v5).
  std::string P = "model.";
  for (const char* cand : {"model.", "language_model.model.", "model.language_model."})
    if (store_->find(std::string(cand) + "embed_tokens.weight")) {
      P = cand;
      break;
    }
  const bool mamba = c.arch == Arch::mamba;  // transformers' MambaForCausalLM names: backbone.*
  if (mamba) P = "backbone.";
  const model::WeightView& emb = get(mamba ? "backbone.embeddings.weight" : P + "embed_tokens.weight",
                                     {c.vocab_size, c.hidden_size});
  // A GGUF with quantized matrices (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; the first layer's q_proj tells) keeps them
  // quantized (`auto`, or q8_0 for Q8_0 files): 0.56 .. 1.06 bytes per weight instead of 4 (CPU, f32) or 2 (CUDA,
  // bf16) after dequantizing; the GEMVs expand one block at a time. On CUDA the other matrices, the activations of
  // multi-row steps and the KV cache are bf16, as for a bf16 checkpoint.
  const model::WeightView* q0 = store_->find(P + "layers.0.self_attn.q_proj.weight");
  const bool q8_src = q0 && q0->type == model::WeightType::q8_0;
  const bool quant_src = q0 && model::is_quantized(q0->type);
  if (dt == "q8_0" && !q8_src) bad("dtype q8_0: " + src + " holds no Q8_0 weight matrices (layer 0's q_proj is not Q8_0)");
  if (comm_ && quant_src)
    fail(Status::unsupported, "--tp " + std::to_string(sh.size) + ": " + src + " holds block-quantized matrices (" +
                                  model::weight_type_name(q0->type) + "), which cannot be split across ranks yet "
                                  "(use a safetensors checkpoint, or --tp 1)");
  if (dt == "auto" && quant_src) dt = q0->type == model::WeightType::q8_0 ? "q8_0" : "quantized";
  if (dt == "auto") dt = emb.type == model::WeightType::bf16 ? "bf16" : "f32";
  bo.keep_quantized = dt == "q8_0" || dt == "quantized";
  bo.weight_dtype = dt == "bf16" ? DType::bf16 : (dt == "f16" ? DType::f16 : DType::f32);
  if (cuda && bo.keep_quantized) bo.weight_dtype = DType::bf16;
  // The CPU backend converts the (memory-mapped) checkpoint into its own buffers: refuse a model whose converted
  // weights cannot fit before converting any (Q8_0 kept as is: ~1.06 bytes per weight, counted as 1).
  if (!cuda && !opts.random_weights)
    check_fits_host_memory(c, bo.keep_quantized ? 1 : dt == "f32" ? 4 : 2, src);
  be_ = cuda ? make_cuda_backend(bo) : make_cpu_backend(bo);
  if (mamba && !be_->supports_ssm())
    fail(Status::unsupported, "model_type mamba: the " + be_->name() +
                                  " backend has no selective state-space ops yet (run mamba models with --device cpu)");
  if (mamba && cuda && c.ssm.state_size > 64)  // kernels::kCudaMaxState: the CUDA scan's register carry
    fail(Status::unsupported, "model_type mamba: state_size " + std::to_string(c.ssm.state_size) +
                                  " exceeds the CUDA scan's limit of 64 (run it with --device cpu)");

  // The KV cache is sized by max_context: bound it by what the model supports (and by a sane row count, so the
  // buffer size products cannot overflow), and check that a session fits, before any weight is converted.
  if (opts.max_context > c.max_position)
    bad("max_context " + std::to_string(opts.max_context) + " exceeds the model's max_position_embeddings " +
        std::to_string(c.max_position));
  if (opts.max_context > limits::kMaxContext)
    bad("max_context " + std::to_string(opts.max_context) + " exceeds flashkit's limit of " +
        std::to_string(limits::kMaxContext) + " tokens per sequence");
  info_.max_context = opts.max_context > 0 ? opts.max_context : std::min<int64_t>(c.max_position, 4096);
  const int64_t full_q = c.num_heads * c.head_dim, full_kv = c.num_kv_heads * c.head_dim;
  q_dim_ = sh.heads * c.head_dim;
  kv_dim_ = sh.kv_heads * c.head_dim;
  check_session_memory();
  if (opts.offload_layers > 0 || opts.gpu_memory_bytes > 0) plan_offload(opts, bo.keep_quantized);

  const int64_t H = c.hidden_size, F = c.intermediate_size, hd = c.head_dim;
  const float norm_off = c.norm_plus_one ? 1.0f : 0.0f;
  int64_t params = 0;
  auto count = [&](const model::WeightView& w) {
    params += w.numel();
    return &w;
  };

  const model::WeightView* embp = count(emb);
  embed_ = be_->load_matrix(std::span<const model::WeightView* const>(&embp, 1));
  // Gemma scales embeddings by sqrt(hidden) rounded to the checkpoint's dtype, as transformers does.
  embed_scale_ = float(c.embed_scale);
  if (emb.type == model::WeightType::bf16) embed_scale_ = bf16_to_f32(f32_to_bf16(embed_scale_));
  if (emb.type == model::WeightType::f16) embed_scale_ = f16_to_f32(f32_to_f16(embed_scale_));

  const model::WeightView* lm = store_->find("lm_head.weight");
  if (!lm && P != "model.") lm = store_->find("language_model.lm_head.weight");
  tied_ = c.tie_embeddings || !lm;
  if (!c.tie_embeddings && !lm)
    bad(src + ": missing tensor \"lm_head.weight\" (config.json has tie_word_embeddings = false)");
  if (tied_) {
    lm_head_ = embed_;
  } else {
    get(lm->name, {c.vocab_size, H});
    const model::WeightView* lp = count(*lm);
    lm_head_ = be_->load_matrix(std::span<const model::WeightView* const>(&lp, 1));
  }
  final_norm_ = be_->load_vector(*count(get(P + (mamba ? "norm_f.weight" : "norm.weight"), {H})), norm_off);

  inv_global_ = be_->upload_f32(rope_inv_freq(c.rope_global, hd));
  inv_local_ = be_->upload_f32(rope_inv_freq(c.rope_local, hd));

  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = P + "layers." + std::to_string(i) + ".";
    LayerWeights L;
    be_->set_layer(i);  // offloaded layers' matrices go to pinned host memory
    if (mamba) {  // backbone.layers.N.{norm, mixer.*}: shapes from config.json, every tensor required
      const SsmConfig& sc = c.ssm;
      const int64_t Di = sc.d_inner, N = sc.state_size, R = sc.dt_rank, W = sc.conv_kernel;
      const std::string mx = p + "mixer.";
      auto one = [&](const std::string& name, std::vector<int64_t> shape, const std::string& bias_name) {
        const model::WeightView* w = count(get(name, shape));
        if (bias_name.empty()) return be_->load_matrix(std::span<const model::WeightView* const>(&w, 1));
        const model::WeightView* b = count(get(bias_name, {shape[0]}));
        return be_->load_matrix(std::span<const model::WeightView* const>(&w, 1),
                                std::span<const model::WeightView* const>(&b, 1));
      };
      auto f32 = [&](const model::WeightView& w) {
        std::vector<float> v(size_t(w.numel()));
        model::to_f32(w, v.data());
        return v;
      };
      L.in_norm = be_->load_vector(*count(get(p + "norm.weight", {H})), 0.0f);
      L.in_proj = one(mx + "in_proj.weight", {2 * Di, H}, sc.proj_bias ? mx + "in_proj.bias" : "");
      L.conv_w = be_->upload_f32(f32(*count(get(mx + "conv1d.weight", {Di, 1, W}))));
      if (sc.conv_bias) L.conv_b = be_->load_vector(*count(get(mx + "conv1d.bias", {Di})), 0.0f);
      L.x_proj = one(mx + "x_proj.weight", {R + 2 * N, Di}, "");
      L.dt_proj = one(mx + "dt_proj.weight", {Di, R}, mx + "dt_proj.bias");
      std::vector<float> A = f32(*count(get(mx + "A_log", {Di, N})));
      for (float& a : A) a = -std::exp(a);  // A = -exp(A_log), as transformers computes it in f32
      L.ssm_A = be_->upload_f32(A);
      L.ssm_D = be_->load_vector(*count(get(mx + "D", {Di})), 0.0f);
      L.out_proj = one(mx + "out_proj.weight", {H, Di}, sc.proj_bias ? mx + "out_proj.bias" : "");
      layers_.push_back(std::move(L));
      continue;
    }
    L.sliding = c.layer_sliding[size_t(i)];
    L.inv_freq = L.sliding ? &inv_local_ : &inv_global_;
    L.rope_scaling = float(L.sliding ? c.rope_local.attention_factor : c.rope_global.attention_factor);
    L.ap.heads = sh.heads;
    L.ap.kv_heads = sh.kv_heads;
    L.ap.head_dim = hd;
    L.ap.scale = float(c.attn_scale);
    L.ap.softcap = float(c.attn_softcap);
    L.ap.window = L.sliding ? c.sliding_window : 0;
    L.in_norm = be_->load_vector(*count(get(p + "input_layernorm.weight", {H})), norm_off);
    L.post_attn_norm = be_->load_vector(*count(get(p + "post_attention_layernorm.weight", {H})), norm_off);
    if (c.sandwich_norms) {
      L.pre_ff_norm = be_->load_vector(*count(get(p + "pre_feedforward_layernorm.weight", {H})), norm_off);
      L.post_ff_norm = be_->load_vector(*count(get(p + "post_feedforward_layernorm.weight", {H})), norm_off);
    }
    if (c.qk_norm) {
      L.q_norm = be_->load_vector(*count(get(p + "self_attn.q_norm.weight", {hd})), norm_off);
      L.k_norm = be_->load_vector(*count(get(p + "self_attn.k_norm.weight", {hd})), norm_off);
    }
    // Rows (q/k/v, gate/up: output features) or columns (o, down: input features) of this rank's shard; views of
    // the whole tensor for one rank.
    auto rows = [&](const model::WeightView& w, int64_t r0, int64_t n) {
      if (!comm_) return w;
      return tp_row_slice(w, r0, n);
    };
    auto cols = [&](const model::WeightView& w, int64_t c0, int64_t n) {
      if (!comm_) return w;
      tp_slices_.emplace_back();
      return tp_col_slice(w, c0, n, tp_slices_.back());
    };
    const int64_t q0r = sh.head0 * hd, kv0r = sh.kv_head0 * hd;
    const model::WeightView qw = rows(*count(get(p + "self_attn.q_proj.weight", {full_q, H})), q0r, q_dim_),
                            kw = rows(*count(get(p + "self_attn.k_proj.weight", {full_kv, H})), kv0r, kv_dim_),
                            vw = rows(*count(get(p + "self_attn.v_proj.weight", {full_kv, H})), kv0r, kv_dim_);
    const model::WeightView* qkv[3] = {&qw, &kw, &vw};
    if (c.attention_bias) {
      const model::WeightView qb = rows(*count(get(p + "self_attn.q_proj.bias", {full_q})), q0r, q_dim_),
                              kb = rows(*count(get(p + "self_attn.k_proj.bias", {full_kv})), kv0r, kv_dim_),
                              vb = rows(*count(get(p + "self_attn.v_proj.bias", {full_kv})), kv0r, kv_dim_);
      const model::WeightView* b[3] = {&qb, &kb, &vb};
      L.qkv = be_->load_matrix(qkv, b);
    } else {
      L.qkv = be_->load_matrix(qkv);
    }
    const model::WeightView ow = cols(*count(get(p + "self_attn.o_proj.weight", {H, full_q})), q0r, q_dim_);
    const model::WeightView* owp = &ow;
    // o_proj's bias is added once: by rank 0, before the all-reduce sums the ranks' partial outputs.
    if (c.o_bias) {
      const model::WeightView* ob = count(get(p + "self_attn.o_proj.bias", {H}));
      if (sh.rank == 0)
        L.o = be_->load_matrix(std::span<const model::WeightView* const>(&owp, 1),
                               std::span<const model::WeightView* const>(&ob, 1));
      else
        L.o = be_->load_matrix(std::span<const model::WeightView* const>(&owp, 1));
    } else {
      L.o = be_->load_matrix(std::span<const model::WeightView* const>(&owp, 1));
    }
    const model::WeightView gw = rows(*count(get(p + "mlp.gate_proj.weight", {F, H})), sh.ff0, sh.ff),
                            uw = rows(*count(get(p + "mlp.up_proj.weight", {F, H})), sh.ff0, sh.ff);
    const model::WeightView* gu[2] = {&gw, &uw};
    L.gate_up = be_->load_matrix(gu);
    const model::WeightView dw = cols(*count(get(p + "mlp.down_proj.weight", {H, F})), sh.ff0, sh.ff);
    const model::WeightView* dwp = &dw;
    L.down = be_->load_matrix(std::span<const model::WeightView* const>(&dwp, 1));
    layers_.push_back(std::move(L));
  }

  be_->set_layer(-1);
  info_.offloaded_layers = int64_t(be_->stats().offloaded_layers);
  info_.host_pinned_bytes = int64_t(be_->stats().host_pinned_bytes);
  info_.architecture = c.model_type;
  info_.source = dir.string();
  info_.backend = be_->name();
  info_.weight_dtype = bo.keep_quantized ? model::weight_type_name(q0->type) : std::string(dtype_name(embed_.w.dtype));
  info_.activation_dtype = std::string(dtype_name(be_->activation_dtype()));
  info_.device_weight_bytes = int64_t(be_->stats().weight_bytes);
  info_.device_scratch_bytes = int64_t(be_->stats().dequant_scratch_bytes);
  info_.kv_dtype = std::string(dtype_name(be_->kv_dtype()));
  info_.vocab_size = c.vocab_size;
  info_.hidden_size = H;
  info_.num_layers = c.num_layers;
  info_.num_heads = c.num_heads;
  info_.num_kv_heads = c.num_kv_heads;
  info_.head_dim = hd;
  info_.parameters = params;
  info_.bos_id = c.bos_id;
  info_.eos_ids = c.eos_ids;
  info_.tp = sh.size;
  // transformers' generate() stops at generation_config.json's eos ids (Gemma 3 instruct: <eos> and <end_of_turn>).
  if (fs::is_directory(dir, ec)) {
    const fs::path gpath = dir / "generation_config.json";
    if (fs::exists(gpath, ec)) {
      try {
        auto gj = json_io::read_json_file(gpath);
        if (gj.is_object() && gj.contains("eos_token_id")) {
          const auto& e = gj["eos_token_id"];
          std::vector<int32_t> more;
          auto id = [&](const nlohmann::json& x) {  // ids outside int32 would wrap: skipped like other junk
            if (x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() <= INT32_MAX)
              more.push_back(int32_t(x.get<int64_t>()));
          };
          if (e.is_array())
            for (auto& x : e) id(x);
          else
            id(e);
          for (int32_t id : more)
            if (std::find(info_.eos_ids.begin(), info_.eos_ids.end(), id) == info_.eos_ids.end())
              info_.eos_ids.push_back(id);
        }
      } catch (const std::exception&) {
        // generation_config.json is advisory; a malformed (or too deep, too large) one is ignored (config.json's
        // ids stay).
      }
    }
  }
  // Rows of logits computed at once when every row is wanted: at most ~64 MiB of logits.
  logit_rows_ = std::max<int64_t>(1, std::min<int64_t>(std::min(opts.prefill_chunk, info_.max_context),
                                                      (int64_t(64) << 20) / (4 * c.vocab_size)));
  // From here on the rank computes with its shard's sizes (info_ keeps the whole model's).
  cfg_.num_heads = sh.heads;
  cfg_.num_kv_heads = sh.kv_heads;
  cfg_.intermediate_size = sh.ff;
}

}  // namespace
}  // namespace engine

std::shared_ptr<Model> Model::load(const std::filesystem::path& dir, const LoadOptions& opts) {
  engine::check_tp(opts.tp);
  if (opts.tp > 1) return engine::load_tp_model(dir, opts);
  return std::make_shared<engine::ModelImpl>(dir, opts);
}

std::shared_ptr<Model> engine::load_rank_model(const std::filesystem::path& dir, const LoadOptions& opts,
                                               dist::Communicator& comm) {
  return std::make_shared<engine::ModelImpl>(dir, opts, &comm);
}

GenerationResult generate(Session& session, std::span<const int32_t> prompt, const GenerateOptions& opts,
                          const std::function<bool(int32_t)>& on_token) {
  using Clock = std::chrono::steady_clock;
  // Speculative decoding (a draft session or n-gram lookup): src/spec.
  if (opts.speculative.enabled()) return spec::generate(session, prompt, opts, on_token);
  if (opts.max_new_tokens < 1)
    fail(Status::invalid_argument, "max_new_tokens must be at least 1, got " + std::to_string(opts.max_new_tokens));
  if (prompt.empty()) fail(Status::invalid_argument, "generate: the prompt is empty (give at least one token)");
  const engine::SamplerParams sp = engine::sampler_params(opts);
  engine::Sampler sampler(sp);  // validates
  std::vector<int32_t> stops = opts.stop_ids;
  if (opts.stop_at_eos)
    for (int32_t e : session.model().info().eos_ids) stops.push_back(e);

  // Device-side greedy decoding (engine/plain_step.hpp): a decode step of this engine's session reduces the logits
  // row on the backend and downloads only the id (the CUDA backend: 8 bytes instead of the whole row, and no CPU scan
  // of the vocabulary) when the choice is the argmax of the raw logits.
  engine::DeviceGreedy* fast = engine::device_greedy(session, sp);

  GenerationResult r;
  r.prompt_tokens = int64_t(prompt.size());
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  const auto t0 = Clock::now();
  session.prefill(prompt);
  const auto t1 = Clock::now();
  r.prefill_s = std::chrono::duration<double>(t1 - t0).count();
  int32_t tok = sampler.sample(session.logits(), history);
  r.time_to_first_token_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto td = Clock::now();
  r.stop_reason = "length";
  while (true) {
    r.tokens.push_back(tok);
    history.push_back(tok);
    if (on_token && !on_token(tok)) {
      r.stop_reason = "callback";
      break;
    }
    if (std::find(stops.begin(), stops.end(), tok) != stops.end()) {
      r.stop_reason = "eos";
      break;
    }
    if (int64_t(r.tokens.size()) >= opts.max_new_tokens) break;
    if (session.position() >= session.max_context()) {
      r.stop_reason = "context";
      break;
    }
    ++r.decode_steps;
    tok = engine::plain_decode_step(session, fast, sampler, sp, history, tok);
  }
  r.decode_s = std::chrono::duration<double>(Clock::now() - td).count();
  return r;
}

}  // namespace flashkit

// ================================================================================================================
// Batched paged steps for serving (engine/paged.hpp). Kept apart from the session code above: forward_paged is the
// op schedule of ModelImpl::forward with per-row positions and paged_attention; a change to one layer schedule must
// be made in both.
// ================================================================================================================
namespace flashkit::engine {
namespace {

// Paged steps need a KV cache; a Mamba sequence has a recurrent state instead (no per-token cache to page), so the
// serving engine runs it in a Session of its own (has_kv_cache; src/serve/session_core.hpp).
void refuse_paged_mamba(const ModelConfig& c) {
  if (c.arch == Arch::mamba)
    fail(Status::unsupported, "paged serving: model_type mamba keeps one recurrent state per sequence, not a paged KV "
                              "cache (serve::Engine runs such models one session per sequence instead)");
}

class PagedRunnerImpl final : public PagedRunner {
 public:
  PagedRunnerImpl(ModelImpl& m, const PagedRunnerOptions& o) : m_(m), o_(o) {
    if (o.block_size < 1 || o.block_size > 4096) bad("paged runner: block_size must be in [1, 4096], got " + std::to_string(o.block_size));
    if (o.num_blocks < 1) bad("paged runner: num_blocks must be >= 1, got " + std::to_string(o.num_blocks));
    if (o.max_rows < 1 || o.max_seqs < 1)
      bad("paged runner: max_rows and max_seqs must be >= 1, got " + std::to_string(o.max_rows) + " and " + std::to_string(o.max_seqs));
    if (o.num_blocks > (int64_t(1) << 30) / o.block_size) bad("paged runner: num_blocks * block_size exceeds 2^30 positions");
    Backend& be = *m.be_;
    refuse_paged_mamba(m.cfg_);
    if (!be.supports_paged())
      fail(Status::unsupported, "paged runner: the " + be.name() +
                                    " backend has no paged KV cache (batched serving runs on the CPU and CUDA backends)");
    const ModelConfig& c = m.cfg_;
    o_.max_seqs = std::min(o.max_seqs, o.max_rows);
    max_blocks_ = (m.info_.max_context + o.block_size - 1) / o.block_size;
    be.reserve_step(o.max_rows);
    const DType adt = be.activation_dtype();
    h_ = be.alloc(DType::f32, o.max_rows, c.hidden_size);
    o_buf_ = be.alloc(DType::f32, o.max_rows, c.hidden_size);
    xn_ = be.alloc(adt, o.max_rows, c.hidden_size);
    qkv_ = be.alloc(adt, o.max_rows, m.q_dim_ + 2 * m.kv_dim_);
    attn_ = be.alloc(adt, o.max_rows, m.q_dim_);
    gu_ = be.alloc(adt, o.max_rows, 2 * c.intermediate_size);
    act_ = be.alloc(adt, o.max_rows, c.intermediate_size);
    logits_ = be.alloc(DType::f32, o_.max_seqs, c.vocab_size);
    for (size_t i = 0; i < m.layers_.size(); ++i) {
      PagedKVLayer l;
      l.block_size = o.block_size;
      l.num_blocks = o.num_blocks;
      l.k = be.alloc(be.kv_dtype(), o.num_blocks * o.block_size, m.kv_dim_);
      l.v = be.alloc(be.kv_dtype(), o.num_blocks * o.block_size, m.kv_dim_);
      be.zero(l.k);  // a block is always written before it is read; zeros keep a bug from reading garbage
      be.zero(l.v);
      kv_.push_back(l);
    }
  }
  ~PagedRunnerImpl() override {
    Backend& be = *m_.be_;
    for (Tensor* t : {&h_, &o_buf_, &xn_, &qkv_, &attn_, &gu_, &act_, &logits_}) be.free(*t);
    for (auto& l : kv_) {
      be.free(l.k);
      be.free(l.v);
    }
  }
  const PagedRunnerOptions& options() const override { return o_; }
  int64_t max_blocks_per_seq() const override { return max_blocks_; }

  void step(const PagedStep& st, float* logits) override {
    check_step(st);
    forward_paged(st, logits, {});
  }
  void step_greedy(const PagedStep& st, std::span<ArgmaxResult> out) override {
    if (out.size() != st.logit_rows.size()) bad("paged step: one greedy result per logit row expected");
    check_step(st);
    Backend& be = *m_.be_;
    if (be.supports_argmax_rows()) {
      forward_paged(st, nullptr, out);
      return;
    }
    const int64_t V = m_.cfg_.vocab_size, n = int64_t(out.size());
    host_logits_.resize(size_t(n * V));
    forward_paged(st, host_logits_.data(), {});
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = host_argmax(host_logits_.data() + i * V, V);
  }
  void logits_row(int64_t i, float* out) override {
    const int64_t V = m_.cfg_.vocab_size;
    if (i < 0 || i >= last_rows_) bad("paged runner: logits_row " + std::to_string(i) + " outside the last step's rows");
    if (!host_logits_.empty() && int64_t(host_logits_.size()) >= (i + 1) * V && last_host_) {
      std::copy_n(host_logits_.data() + i * V, V, out);
      return;
    }
    m_.be_->download_f32(out, logits_.row_slice(i, 1), 1);
  }
  bool greedy_allowed() const override { return m_.tuning_.device_argmax; }

 private:
  // argmax()'s rules on the host: the lowest index of the maximum (+0 == -0); NaN or +inf anywhere, or only -inf,
  // make the row invalid; unique = the maximum occurs once.
  static ArgmaxResult host_argmax(const float* x, int64_t n) {
    ArgmaxResult r;
    float best = -INFINITY;
    int64_t at = -1, count = 0;
    bool bad_value = false;
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      if (std::isnan(v) || v == INFINITY) bad_value = true;
      if (v > best) best = v, at = i, count = 1;
      else if (v == best) ++count;
    }
    r.valid = !bad_value && best != -INFINITY;
    r.index = r.valid ? int32_t(at) : -1;
    r.unique = count <= 1;
    return r;
  }
  void check_step(const PagedStep& st) const {
    const int64_t T = int64_t(st.tokens.size()), n = int64_t(st.logit_rows.size());
    if (T < 1 || T > o_.max_rows) bad("paged step: " + std::to_string(T) + " rows, expected 1.." + std::to_string(o_.max_rows));
    if (int64_t(st.positions.size()) != T || int64_t(st.row_seq.size()) != T)
      bad("paged step: positions and row_seq need one entry per row");
    if (n > o_.max_seqs || st.num_seqs > o_.max_seqs || st.max_blocks != max_blocks_ ||
        int64_t(st.block_tables.size()) != st.num_seqs * st.max_blocks)
      bad("paged step: logit rows, sequences or block tables do not match the runner's sizes");
  }
  // logits_out (host [n, vocab]) or greedy (n results): what the step delivers.
  void forward_paged(const PagedStep& st, float* logits_out, std::span<ArgmaxResult> greedy) {
    ModelImpl& m = m_;
    Backend& be = *m.be_;
    const ModelConfig& c = m.cfg_;
    const int64_t T = int64_t(st.tokens.size()), n = int64_t(st.logit_rows.size());
    const float eps = float(c.rms_norm_eps);
    be.set_paged_step(st);
    last_rows_ = n;
    last_host_ = logits_out == host_logits_.data() && logits_out;
    // A step's ops depend on its shape only (rows, logit rows, greedy or not): every per-step value is in the step
    // buffer, so a backend with graphs captures the step the second time it sees the shape (steady decoding repeats
    // one shape; a shape seen once, a prompt chunk's, is not worth a capture) and replays it after. Paged keys have
    // the top bit set (session keys are id << 8 | kind).
    const uint64_t key = (uint64_t(1) << 63) | (uint64_t(T) << 24) | (uint64_t(n) << 1) | (greedy.empty() ? 0u : 1u);
    bool graphable = false;
    if (n > 0 && !m.opts_.profile && !m.comm_ && T < (int64_t(1) << 22) && ++shapes_seen_[key] >= 2) {
      graphable = graph_shapes_.count(key) > 0;
      if (!graphable && graph_shapes_.size() < kMaxGraphs) graphable = graph_shapes_.insert(key).second;
    }
    if (!(graphable && be.graph_replay(key))) {
      if (graphable) be.graph_begin(key);
      record_step(T, n, !greedy.empty(), eps);
      if (graphable) be.graph_end(key);
    }
    if (n == 0) return;
    const Tensor lg = logits_.row_slice(0, n);
    if (!greedy.empty()) m.op("argmax.download", [&] { be.argmax_rows_result(greedy); });
    else m.op("logits.download", [&] { be.download_f32(logits_out, lg, n); });
  }
  // The ops of a step of T rows (n of them sampling; greedy: ending in the per-row argmax).
  void record_step(int64_t T, int64_t n, bool greedy, float eps) {
    ModelImpl& m = m_;
    Backend& be = *m.be_;
    const ModelConfig& c = m.cfg_;
    const Tensor h = h_, xn = xn_, qkv = qkv_, attn = attn_, o = o_buf_, gu = gu_, act = act_;
    const Tensor q = qkv.col_slice(0, m.q_dim_), k = qkv.col_slice(m.q_dim_, m.kv_dim_),
                 v = qkv.col_slice(m.q_dim_ + m.kv_dim_, m.kv_dim_);
    const Activation actk = c.activation == "silu" ? Activation::silu : Activation::gelu_tanh;
    m.op("embed", [&] { be.embed(m.embed_, h, T, m.embed_scale_); });
    for (size_t li = 0; li < m.layers_.size(); ++li) {
      const LayerWeights& L = m.layers_[li];
      be.set_layer(int64_t(li));
      m.op("rms_norm", [&] { be.rms_norm(h, L.in_norm, xn, T, c.hidden_size, eps); });
      m.op("linear.qkv", [&] { be.linear(xn, L.qkv, qkv, T); });
      if (c.qk_norm) {
        m.op("rms_norm.qk", [&] {
          be.rms_norm(q, L.q_norm, q, T, c.head_dim, eps);
          be.rms_norm(k, L.k_norm, k, T, c.head_dim, eps);
        });
      }
      m.op("rope", [&] {
        be.rope(q, T, c.num_heads, c.head_dim, *L.inv_freq, L.rope_scaling);
        be.rope(k, T, c.num_kv_heads, c.head_dim, *L.inv_freq, L.rope_scaling);
      });
      m.op("attention", [&] { be.paged_attention(q, k, v, kv_[li], attn, T, L.ap); });
      m.op("linear.o", [&] { be.linear(attn, L.o, o, T); });
      if (m.comm_) m.op("all_reduce", [&] { be.all_reduce_sum(o, T, *m.comm_); });
      if (c.sandwich_norms) {
        m.op("rms_norm", [&] { be.add_rms_norm(o, L.post_attn_norm, h, T, eps); });
        m.op("rms_norm", [&] { be.rms_norm(h, L.pre_ff_norm, xn, T, c.hidden_size, eps); });
      } else {
        m.op("add", [&] { be.add(o, h, T); });
        m.op("rms_norm", [&] { be.rms_norm(h, L.post_attn_norm, xn, T, c.hidden_size, eps); });
      }
      m.op("linear.gate_up", [&] { be.linear(xn, L.gate_up, gu, T); });
      m.op("gated_act", [&] { be.gated_act(gu, act, T, actk); });
      m.op("linear.down", [&] { be.linear(act, L.down, o, T); });
      if (m.comm_) m.op("all_reduce", [&] { be.all_reduce_sum(o, T, *m.comm_); });
      if (c.sandwich_norms) m.op("rms_norm", [&] { be.add_rms_norm(o, L.post_ff_norm, h, T, eps); });
      else m.op("add", [&] { be.add(o, h, T); });
    }
    be.set_layer(-1);
    if (n == 0) return;
    // Only the rows that sample a token go through the final norm and the lm_head (o is free scratch by now).
    const Tensor hg = o.row_slice(0, n), xg = xn.row_slice(0, n), lg = logits_.row_slice(0, n);
    m.op("gather", [&] { be.gather_rows(h, hg, n); });
    m.op("rms_norm", [&] { be.rms_norm(hg, m.final_norm_, xg, n, c.hidden_size, eps); });
    m.op("linear.lm_head", [&] { be.linear(xg, m.lm_head_, lg, n); });
    if (c.final_softcap > 0) m.op("softcap", [&] { be.softcap(lg, n, float(c.final_softcap)); });
    if (greedy) m.op("argmax", [&] { be.argmax_rows(lg, n); });
  }

  ModelImpl& m_;
  PagedRunnerOptions o_;
  int64_t max_blocks_ = 0;
  Tensor h_, o_buf_, xn_, qkv_, attn_, gu_, act_, logits_;
  std::vector<PagedKVLayer> kv_;
  std::vector<float> host_logits_;  // step_greedy on a backend without argmax_rows
  static constexpr size_t kMaxGraphs = 64;           // step shapes captured at most (others run eagerly)
  std::unordered_map<uint64_t, int> shapes_seen_;    // step shape key -> steps run with it
  std::unordered_set<uint64_t> graph_shapes_;        // the shapes that run as graphs
  int64_t last_rows_ = 0;           // logit rows of the last step (logits_row)
  bool last_host_ = false;          // the last step's logits are in host_logits_
};

ModelImpl& impl_of(const Model& model) {
  auto* m = dynamic_cast<const ModelImpl*>(&model);
  if (!m) fail(Status::invalid_argument, "paged runner: not a model loaded by flashkit::Model::load");
  return const_cast<ModelImpl&>(*m);
}

}  // namespace

int64_t paged_kv_bytes_per_token(const Model& model) {
  int world = 1;
  if (Model* local = tp_leader_local(model, &world)) return world * paged_kv_bytes_per_token(*local);
  // A tensor-parallel model: every rank's pool (its KV heads) holds a slice of each token.
  if (const auto ranks = tp_ranks(model); !ranks.empty()) {
    int64_t sum = 0;
    for (Model* r : ranks) sum += paged_kv_bytes_per_token(*r);
    return sum;
  }
  const ModelImpl& m = impl_of(model);
  refuse_paged_mamba(m.cfg_);  // no KV cache: 0 bytes per token would divide by zero in the serving engine
  return m.cfg_.num_layers * 2 * m.kv_dim_ * dtype_size(m.be_->kv_dtype());
}

bool has_kv_cache(const Model& model) {
  if (Model* local = tp_leader_local(model)) return has_kv_cache(*local);
  if (const auto ranks = tp_ranks(model); !ranks.empty()) return has_kv_cache(*ranks[0]);
  return impl_of(model).cfg_.arch != Arch::mamba;
}

// Tensor-parallel: rank 0's device (the ranks of one process share it, or each has one of the same kind); the pool is
// sized from it with every rank's bytes per token (paged_kv_bytes_per_token), so it is conservative either way.
int64_t paged_device_free_bytes(const Model& model) {
  if (Model* local = tp_leader_local(model)) return paged_device_free_bytes(*local);
  if (const auto ranks = tp_ranks(model); !ranks.empty()) return paged_device_free_bytes(*ranks[0]);
  return impl_of(model).be_->free_memory_bytes();
}

std::unique_ptr<PagedRunner> make_paged_runner(Model& model, const PagedRunnerOptions& opts) {
  if (!tp_ranks(model).empty()) return make_tp_paged_runner(model, opts);
  if (tp_leader_local(model)) return make_tp_leader_paged_runner(model, opts);
  return std::make_unique<PagedRunnerImpl>(impl_of(model), opts);
}

std::string model_identity(const Model& model) {
  namespace fs = std::filesystem;
  if (const auto ranks = tp_ranks(model); !ranks.empty())
    return model_identity(*ranks[0]) + "tp=" + std::to_string(ranks.size()) + ";";
  int world = 1;
  if (Model* local = tp_leader_local(model, &world))
    return model_identity(*local) + "tp=" + std::to_string(world) + ";";
  const ModelImpl& m = impl_of(model);
  const ModelConfig& c = m.cfg_;
  std::string id;
  auto add = [&](const std::string& k, const std::string& v) { id += k + "=" + v + ";"; };
  auto num = [](double x) {
    char b[40];
    std::snprintf(b, sizeof b, "%.17g", x);
    return std::string(b);
  };
  add("arch", c.model_type);
  for (auto [k, v] : {std::pair{"vocab", c.vocab_size}, {"hidden", c.hidden_size}, {"ff", c.intermediate_size},
                      {"layers", c.num_layers}, {"heads", c.num_heads}, {"kv_heads", c.num_kv_heads},
                      {"head_dim", c.head_dim}, {"window", c.sliding_window}})
    add(k, std::to_string(v));
  add("eps", num(c.rms_norm_eps));
  add("act", c.activation);
  add("norms", std::to_string(c.norm_plus_one) + std::to_string(c.qk_norm) + std::to_string(c.sandwich_norms) +
                   std::to_string(c.attention_bias) + std::to_string(c.o_bias) + std::to_string(c.tie_embeddings));
  add("scales", num(c.embed_scale) + "," + num(c.attn_scale) + "," + num(c.attn_softcap));
  std::string sl;
  for (bool b : c.layer_sliding) sl += b ? '1' : '0';
  add("sliding", sl);
  for (const RopeConfig* r : {&c.rope_global, &c.rope_local})
    add("rope", r->type + "," + num(r->theta) + "," + num(r->factor) + "," + num(r->low_freq_factor) + "," +
                    num(r->high_freq_factor) + "," + num(r->original_max_position) + "," + num(r->attention_factor));
  add("dtypes", m.info_.weight_dtype + "," + m.info_.activation_dtype + "," + m.info_.kv_dtype);
  add("backend", std::string(m.be_->device() == Device::cpu ? "cpu" : "cuda"));
  if (m.opts_.random_weights) add("random_weights", std::to_string(m.opts_.random_seed));
  // The checkpoint files: name, size and modification time of every regular file of the model directory (or the
  // .gguf file); a rewritten or replaced checkpoint changes the identity.
  std::error_code ec;
  const fs::path src = m.info_.source;
  std::vector<fs::path> files;
  if (fs::is_directory(src, ec)) {
    for (const auto& e : fs::directory_iterator(src, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
  } else {
    files.push_back(src);
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const auto size = fs::file_size(f, ec);
    const auto mtime = fs::last_write_time(f, ec).time_since_epoch().count();
    add("file", f.filename().string() + ":" + std::to_string(ec ? 0 : size) + ":" + std::to_string(mtime));
  }
  return id;
}

}  // namespace flashkit::engine
