// The CPU backend: f32 activations, f32 or bf16 matrices (zero-copy from the memory-mapped checkpoint when the
// stored type is the one wanted), OpenMP loops for the element-wise ops, flashkit::attention_forward for
// attention (prefill and decode, the latter through the flash path's split-KV with seqlen_q = 1).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/backend.hpp"
#include "engine/cpu/gemv.hpp"
#include "engine/cpu/gemv_quant.hpp"
#include "model/quant.hpp"
#include "engine/cpu/paged_attention.hpp"
#include "engine/paged_spans.hpp"
#include "engine/cpu/ssm_ops.hpp"
#include "engine/sampler.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/runtime.hpp"

namespace flashkit::engine {

namespace {

using cpu::Isa;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& o) {
    threads_ = o.threads > 0 ? o.threads : num_threads();  // this backend's own count; the global stays as it is
    isa_ = cpu::detect_isa(o.tuning.cpu_isa);
    wtype_ = o.weight_dtype == DType::bf16 ? DType::bf16 : DType::f32;  // f16 requests are stored as f32
    keep_quant_ = o.keep_quantized;
  }
  ~CpuBackend() override {
    for (void* p : owned_) std::free(p);
  }

  Device device() const override { return Device::cpu; }
  std::string name() const override {
    return std::string("cpu.") + cpu::isa_name(isa_) + " (" + std::to_string(threads_) + " threads)";
  }
  DType activation_dtype() const override { return DType::f32; }
  DType kv_dtype() const override { return DType::f32; }

  Tensor alloc(DType dtype, int64_t rows, int64_t cols) override {
    size_t bytes = size_t(std::max<int64_t>(rows * cols, 1)) * size_t(dtype_size(dtype));
    bytes = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) fail(Status::out_of_memory, "cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
    owned_.insert(p);
    return Tensor{p, dtype, rows, cols, cols};
  }
  void free(Tensor& t) override {
    tree_kv_.erase(t.data);  // a KV cache's tree-step keys/values (keyed by its k buffer)
    auto it = owned_.find(t.data);
    if (it != owned_.end()) {
      std::free(t.data);
      owned_.erase(it);
    }
    t = Tensor{};
  }
  void upload(const Tensor& dst, const void* host, size_t bytes) override { std::memcpy(dst.data, host, bytes); }
  void download(void* host, const Tensor& src, size_t bytes) override { std::memcpy(host, src.data, bytes); }
  void download_f32(float* host, const Tensor& src, int64_t rows) override {
    for (int64_t r = 0; r < rows; ++r) std::memcpy(host + r * src.cols, row(src, r), size_t(src.cols) * 4);
  }
  void zero(const Tensor& t) override {
    for (int64_t r = 0; r < t.rows; ++r)
      std::memset(static_cast<char*>(t.data) + r * t.ld * dtype_size(t.dtype), 0, size_t(t.cols * dtype_size(t.dtype)));
  }
  void synchronize() override {}

  Matrix load_matrix(std::span<const model::WeightView* const> parts,
                     std::span<const model::WeightView* const> bias_parts) override {
    Matrix m;
    m.cols = parts[0]->shape.size() == 2 ? parts[0]->shape[1] : parts[0]->numel();
    for (auto* p : parts) m.rows += p->shape[0];
    // GGUF block-quantized parts stay as their blocks, one segment per part (q/k/v of a Q4_K_M file mix Q4_K and
    // Q6_K), each pointing into the mapped file; linear runs one quantized GEMM per segment.
    bool keep = keep_quant_;
    for (auto* p : parts)
      keep = keep && model::is_quantized(p->type) && m.cols % model::quant_block(p->type).values == 0;
    if (keep) {
      auto q = std::make_shared<QuantMatrix>();
      for (auto* p : parts) q->segments.push_back({p->type, p->shape[0], static_cast<const uint8_t*>(p->data)});
      m.w = Tensor{const_cast<uint8_t*>(q->segments[0].blocks), kQuantMarker, m.rows, m.cols, m.cols};
      m.impl = q;
    }
    const bool zero_copy = parts.size() == 1 && ((wtype_ == DType::f32 && parts[0]->type == model::WeightType::f32) ||
                                                 (wtype_ == DType::bf16 && parts[0]->type == model::WeightType::bf16));
    if (keep) {
    } else if (zero_copy) {
      m.w = Tensor{const_cast<void*>(parts[0]->data), wtype_, m.rows, m.cols, m.cols};
    } else {
      m.w = alloc(wtype_, m.rows, m.cols);
      int64_t r0 = 0;
      for (auto* p : parts) {
        if (wtype_ == DType::f32) model::to_f32(*p, static_cast<float*>(m.w.data) + r0 * m.cols);
        else model::to_bf16(*p, static_cast<uint16_t*>(m.w.data) + r0 * m.cols);
        r0 += p->shape[0];
      }
    }
    if (!bias_parts.empty()) {
      m.bias = alloc(DType::f32, 1, m.rows);
      int64_t r0 = 0;
      for (auto* b : bias_parts) {
        model::to_f32(*b, static_cast<float*>(m.bias.data) + r0);
        r0 += b->numel();
      }
    }
    return m;
  }
  Tensor load_vector(const model::WeightView& w, float offset) override {
    Tensor t = alloc(DType::f32, 1, w.numel());
    float* d = static_cast<float*>(t.data);
    model::to_f32(w, d);
    if (offset != 0)
      for (int64_t i = 0; i < w.numel(); ++i) d[i] += offset;
    return t;
  }
  Tensor upload_f32(std::span<const float> values) override {
    Tensor t = alloc(DType::f32, 1, int64_t(values.size()));
    if (!values.empty()) std::memcpy(t.data, values.data(), values.size() * 4);  // empty: Mamba has no RoPE table
    return t;
  }
  void free_matrix(Matrix& m) override {
    if (m.w.dtype != kQuantMarker) free(m.w);  // no-op for zero-copy views (not owned); blocks are the file's
    if (!m.bias.empty()) free(m.bias);
    m = Matrix{};
  }

  void reserve_step(int64_t max_rows) override { tokens_.reserve(size_t(max_rows)); }
  void set_step(std::span<const int32_t> tokens, int64_t pos0) override {
    tokens_.assign(tokens.begin(), tokens.end());
    pos0_ = pos0;
    exact_ = false;
    depth_.clear();
    parent_.clear();
    paged_ = false;
  }

  // ---- speculative verification (backend.hpp, "speculative verification steps") ----
  bool supports_tree() const override { return true; }
  void set_step_shape(const StepShape& shape) override {
    exact_ = shape.decode_exact || !shape.parent.empty();
    parent_.assign(shape.parent.begin(), shape.parent.end());
    depth_.assign(parent_.size(), 0);
    for (size_t t = 0; t < parent_.size(); ++t) {
      const int32_t pa = parent_[t];
      if (t == 0 ? pa != -1 : (pa < 0 || size_t(pa) >= t))
        fail(Status::invalid_argument, "tree step: parent[" + std::to_string(t) + "] = " + std::to_string(pa) +
                                           (t == 0 ? " (the root's parent must be -1)" : " (expected in [0, t))"));
      depth_[t] = t == 0 ? 0 : depth_[size_t(pa)] + 1;
    }
  }
  void kv_commit_tree(const KVLayer& cache, int64_t pos0, std::span<const int32_t> rows) override {
    auto it = tree_kv_.find(cache.k.data);
    if (it == tree_kv_.end()) fail(Status::invalid_argument, "kv_commit_tree: no tree step ran on this cache");
    const TreeKV& st = it->second;
    for (size_t j = 0; j < rows.size(); ++j) {
      if (rows[j] < 0 || rows[j] >= st.rows) fail(Status::invalid_argument, "kv_commit_tree: row out of range");
      const int64_t slot = cache.ring ? (pos0 + int64_t(j)) % cache.capacity : pos0 + int64_t(j);
      std::memcpy(frow(cache.k, slot), st.k.data() + rows[j] * st.kvd, size_t(st.kvd) * 4);
      std::memcpy(frow(cache.v, slot), st.v.data() + rows[j] * st.kvd, size_t(st.kvd) * 4);
    }
  }
  // Batched paged steps (backend.hpp, "Paged KV cache"): rope reads per-row positions, paged_attention the tables.
  bool supports_paged() const override { return true; }
  void set_paged_step(const PagedStep& st) override {
    tokens_.assign(st.tokens.begin(), st.tokens.end());
    positions_.assign(st.positions.begin(), st.positions.end());
    row_seq_.assign(st.row_seq.begin(), st.row_seq.end());
    tables_.assign(st.block_tables.begin(), st.block_tables.end());
    logit_rows_.assign(st.logit_rows.begin(), st.logit_rows.end());
    max_blocks_ = st.max_blocks;
    pos0_ = 0;
    paged_ = true;
    exact_ = false;  // a paged step is never a speculative tree or chain step
    depth_.clear();
    parent_.clear();
  }

  void embed(const Matrix& table, const Tensor& out, int64_t T, float scale) override {
    const int64_t H = table.cols;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = tokens_[size_t(t)];
      float* o = frow(out, t);
      if (table.w.dtype == kQuantMarker) {  // one row of quantized blocks, expanded
        const auto& seg = static_cast<const QuantMatrix*>(table.impl.get())->segments[0];
        const model::QuantBlock qb = model::quant_block(seg.type);
        model::dequantize_blocks(seg.type, seg.blocks + id * (H / qb.values) * qb.bytes, H / qb.values, o);
        for (int64_t i = 0; i < H; ++i) o[i] *= scale;
      } else if (table.w.dtype == DType::bf16) {
        auto* s = static_cast<const uint16_t*>(table.w.data) + id * H;
        for (int64_t i = 0; i < H; ++i) o[i] = bf16_to_f32(s[i]) * scale;
      } else {
        auto* s = static_cast<const float*>(table.w.data) + id * H;
        for (int64_t i = 0; i < H; ++i) o[i] = s[i] * scale;
      }
    }
  }

  void rms_norm(const Tensor& x, const Tensor& w, const Tensor& out, int64_t T, int64_t group, float eps) override {
    const int64_t G = x.cols / group;
    const float* wv = static_cast<const float*>(w.data);
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads_) if (T * x.cols > 65536)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t g = 0; g < G; ++g) {
        const float* xi = frow(x, t) + g * group;
        float* o = frow(out, t) + g * group;
        const float r = inv_rms(xi, group, eps);
        for (int64_t i = 0; i < group; ++i) o[i] = xi[i] * r * wv[i];
      }
  }

  void add_rms_norm(const Tensor& x, const Tensor& w, const Tensor& residual, int64_t T, float eps) override {
    const float* wv = static_cast<const float*>(w.data);
    const int64_t n = x.cols;
    for (int64_t t = 0; t < T; ++t) {
      const float* xi = frow(x, t);
      float* o = frow(residual, t);
      const float r = inv_rms(xi, n, eps);
      for (int64_t i = 0; i < n; ++i) o[i] += xi[i] * r * wv[i];
    }
  }

  void linear(const Tensor& x, const Matrix& W, const Tensor& out, int64_t T) override {
    // Decode-exact steps stay on the GEMV (blocks of <= 8 rows): each output is then the same sequence of FMAs as in
    // a one-row step, whereas the GEMM path (T > 8) sums in another order.
    const int64_t block = exact_ ? 8 : T;
    for (int64_t t0 = 0; t0 < T; t0 += block) {
      const float* xt = static_cast<const float*>(x.data) + t0 * x.ld;
      float* ot = static_cast<float*>(out.data) + t0 * out.ld;
      const int64_t tb = std::min(block, T - t0);
      if (W.w.dtype != kQuantMarker) {
        cpu::matmul(isa_, threads_, xt, x.ld, tb, W.w.data, W.w.dtype, W.rows, W.cols, ot, out.ld);
        continue;
      }
      int64_t r0 = 0;
      for (const auto& seg : static_cast<const QuantMatrix*>(W.impl.get())->segments) {
        cpu::matmul_quant(isa_, threads_, xt, x.ld, tb, seg.blocks, seg.type, seg.rows, W.cols, ot + r0, out.ld);
        r0 += seg.rows;
      }
    }
    if (!W.bias.empty()) {
      const float* b = static_cast<const float*>(W.bias.data);
      for (int64_t t = 0; t < T; ++t) {
        float* o = frow(out, t);
        for (int64_t i = 0; i < W.rows; ++i) o[i] += b[i];
      }
    }
  }

  void rope(const Tensor& x, int64_t T, int64_t heads, int64_t head_dim, const Tensor& inv_freq,
            float attn_scaling) override {
    const int64_t half = head_dim / 2;
    const float* inv = static_cast<const float*>(inv_freq.data);
    cs_.resize(size_t(2 * half));
    for (int64_t t = 0; t < T; ++t) {
      const float pos = float(paged_ ? positions_[size_t(t)] : pos0_ + (depth_.empty() ? t : depth_[size_t(t)]));
      for (int64_t i = 0; i < half; ++i) {
        const float ang = pos * inv[i];  // f32 product, as transformers computes the angles
        cs_[size_t(i)] = float(std::cos(double(ang))) * attn_scaling;
        cs_[size_t(half + i)] = float(std::sin(double(ang))) * attn_scaling;
      }
      float* base = frow(x, t);
      for (int64_t h = 0; h < heads; ++h) {
        float* v = base + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs_[size_t(i)], s = cs_[size_t(half + i)];
          const float a = v[i], b = v[i + half];
          v[i] = a * c - b * s;
          v[i + half] = b * c + a * s;
        }
      }
    }
  }

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const KVLayer& cache, const Tensor& out,
                 int64_t T, const AttentionParams& p) override {
    const int64_t kvd = p.kv_heads * p.head_dim;
    const int64_t pos0 = pos0_;
    const int64_t cap = cache.capacity;
    auto store = [&](int64_t t) {  // chunk row t -> its cache row
      const int64_t slot = cache.ring ? (pos0 + t) % cap : pos0 + t;
      std::memcpy(frow(cache.k, slot), frow(k, t), size_t(kvd) * 4);
      std::memcpy(frow(cache.v, slot), frow(v, t), size_t(kvd) * 4);
    };
    const int64_t wl = p.window > 0 ? p.window - 1 : -1;
    if (!parent_.empty()) {
      tree_attention(q, k, v, cache, out, T, p);
    } else if (T == 1 || exact_) {
      // A decode step, or a verification step computed as decode steps: one query row at a time, each row's keys
      // appended first (a ring slot a later row overwrites is outside every window still to come).
      for (int64_t t = 0; t < T; ++t) {
        store(t);
        attend_one(q.row_slice(t, 1), cache, out.row_slice(t, 1), pos0 + t, p);
      }
    } else if (!cache.ring || pos0 + T <= cap) {
      for (int64_t t = 0; t < T; ++t) store(t);
      run_attention(q, cache.k.data, cache.v.data, kvd, pos0 + T, out, T, p, wl);
    } else {
      // A chunk on a wrapped ring: unroll the still-visible old keys in position order, append the chunk.
      const int64_t n_old = std::min<int64_t>(pos0, p.window > 0 ? p.window - 1 : cap);
      const int64_t L = n_old + T;
      ktmp_.resize(size_t(L * kvd));
      vtmp_.resize(size_t(L * kvd));
      for (int64_t j = 0; j < n_old; ++j) {
        const int64_t slot = (pos0 - n_old + j) % cap;
        std::memcpy(ktmp_.data() + j * kvd, frow(cache.k, slot), size_t(kvd) * 4);
        std::memcpy(vtmp_.data() + j * kvd, frow(cache.v, slot), size_t(kvd) * 4);
      }
      for (int64_t t = 0; t < T; ++t) {
        std::memcpy(ktmp_.data() + (n_old + t) * kvd, frow(k, t), size_t(kvd) * 4);
        std::memcpy(vtmp_.data() + (n_old + t) * kvd, frow(v, t), size_t(kvd) * 4);
      }
      run_attention(q, ktmp_.data(), vtmp_.data(), kvd, L, out, T, p, wl);
      for (int64_t t = std::max<int64_t>(0, T - cap); t < T; ++t) store(t);
    }
  }

  void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKVLayer& cache,
                       const Tensor& out, int64_t T, const AttentionParams& p) override {
    const int64_t kvd = p.kv_heads * p.head_dim, bs = cache.block_size;
    auto slot = [&](int64_t t) {
      const int64_t pos = positions_[size_t(t)];
      return int64_t(tables_[size_t(row_seq_[size_t(t)] * max_blocks_ + pos / bs)]) * bs + pos % bs;
    };
    for (int64_t t = 0; t < T; ++t) {
      const int64_t s = slot(t);
      std::memcpy(frow(cache.k, s), frow(k, t), size_t(kvd) * 4);
      std::memcpy(frow(cache.v, s), frow(v, t), size_t(kvd) * 4);
    }
    // Decode rows read their blocks in place (the paged decode kernel, all such rows at once); a chunk of several
    // rows (a prompt) gathers its visible keys in position order and runs the flash kernel, as a session's prefill
    // does (engine/paged_spans.hpp).
    single_.clear();
    const int64_t wl = p.window > 0 ? p.window - 1 : -1;
    for (const PagedSpan& sp : plan_paged_spans(positions_, row_seq_, 2)) {
      if (!sp.chunk) {
        for (int64_t t = sp.row0; t < sp.row0 + sp.rows; ++t) single_.push_back(int32_t(t));
        continue;
      }
      const int64_t lo = sp.key_lo(p.window), L = sp.keys(p.window);
      ktmp_.resize(size_t(L * kvd));
      vtmp_.resize(size_t(L * kvd));
      const int32_t* table = tables_.data() + sp.seq * max_blocks_;
      for (int64_t j = lo; j < lo + L; ++j) {
        const int64_t sl = int64_t(table[j / bs]) * bs + j % bs;
        std::memcpy(ktmp_.data() + (j - lo) * kvd, frow(cache.k, sl), size_t(kvd) * 4);
        std::memcpy(vtmp_.data() + (j - lo) * kvd, frow(cache.v, sl), size_t(kvd) * 4);
      }
      run_attention(q.row_slice(sp.row0, sp.rows), ktmp_.data(), vtmp_.data(), kvd, L, out.row_slice(sp.row0, sp.rows),
                    sp.rows, p, wl);
    }
    if (!single_.empty()) {
      cpu::PagedDecodeArgs a;
      a.q = static_cast<const float*>(q.data);
      a.ldq = q.ld;
      a.out = static_cast<float*>(out.data);
      a.ldo = out.ld;
      a.k_pool = static_cast<const float*>(cache.k.data);
      a.v_pool = static_cast<const float*>(cache.v.data);
      a.block_size = bs;
      a.block_tables = tables_.data();
      a.max_blocks = max_blocks_;
      a.rows = single_.data();
      a.n_rows = int64_t(single_.size());
      a.positions = positions_.data();
      a.row_seq = row_seq_.data();
      a.heads = p.heads;
      a.kv_heads = p.kv_heads;
      a.head_dim = p.head_dim;
      a.scale = p.scale;
      a.softcap = p.softcap;
      a.window = p.window;
      cpu::paged_decode_attention(isa_, threads_, a);
    }
  }
  void gather_rows(const Tensor& x, const Tensor& out, int64_t n) override {
    for (int64_t i = 0; i < n; ++i)
      std::memmove(frow(out, i), frow(x, logit_rows_[size_t(i)]), size_t(x.cols) * 4);
  }

  void gated_act(const Tensor& gu, const Tensor& out, int64_t T, Activation act) override {
    cpu::gated_act(isa_, threads_, static_cast<const float*>(gu.data), gu.ld, static_cast<float*>(out.data), out.ld, T,
                   out.cols, act == Activation::silu);
  }

  void add(const Tensor& x, const Tensor& y, int64_t T) override {
    for (int64_t t = 0; t < T; ++t) {
      const float* a = frow(x, t);
      float* b = frow(y, t);
      for (int64_t i = 0; i < x.cols; ++i) b[i] += a[i];
    }
  }

  void softcap(const Tensor& x, int64_t T, float cap) override {
    const float inv = 1.0f / cap;
    for (int64_t t = 0; t < T; ++t) {
      float* a = frow(x, t);
#pragma omp parallel for schedule(static) num_threads(threads_) if (x.cols > 65536)
      for (int64_t i = 0; i < x.cols; ++i) a[i] = std::tanh(a[i] * inv) * cap;
    }
  }

  // Mamba layers: the library's CPU SSM kernels on this sequence's rows (engine/cpu/ssm_ops.cpp).
  bool supports_ssm() const override { return true; }
  void causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& conv_state, const Tensor& out,
                     int64_t T) override {
    cpu::causal_conv1d(x, w, bias, conv_state, out, T, threads_);
  }
  void selective_scan(const Tensor& u, const Tensor& delta, const Tensor& B, const Tensor& C, const Tensor& z,
                      const Tensor& A, const Tensor& D, const Tensor& state, const Tensor& y, int64_t T) override {
    cpu::selective_scan(u, delta, B, C, z, A, D, state, y, T, threads_);
  }

  // Nothing to save on the host but the row copy; same rules as the sampler's greedy scan.
  void argmax(const Tensor& logits) override { argmax_ = scan_argmax(frow(logits, 0), logits.cols); }
  ArgmaxResult argmax_result() override { return argmax_; }

 private:
  static const char* row(const Tensor& t, int64_t r) {
    return static_cast<const char*>(t.data) + r * t.ld * dtype_size(t.dtype);
  }
  static float* frow(const Tensor& t, int64_t r) { return static_cast<float*>(t.data) + r * t.ld; }
  // Max and validity in one vectorised pass, then the first index of the max and whether it repeats.
  static ArgmaxResult scan_argmax(const float* v, int64_t n) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    const LogitsScan sc = scan_logits(v, size_t(n));
    const float mx = sc.max;
    const bool bad = sc.invalid;
    ArgmaxResult r;
    r.valid = !bad && mx != -kInf && n > 0;
    if (!r.valid) return r;
    int64_t best = 0;
    while (v[best] != mx) ++best;
    r.index = int32_t(best);
    int64_t j = best + 1;
#if defined(__SSE2__)
    const __m128 vm = _mm_set1_ps(mx);
    for (; j + 4 <= n; j += 4)
      if (_mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(v + j), vm))) {
        r.unique = false;
        return r;
      }
#endif
    for (; j < n; ++j)
      if (v[j] == mx) {
        r.unique = false;
        break;
      }
    return r;
  }
  static float inv_rms(const float* x, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
    return float(1.0 / std::sqrt(float(ss / double(n)) + double(eps)));
  }

  void run_attention(const Tensor& q, void* kdata, void* vdata, int64_t kvd, int64_t L, const Tensor& out, int64_t T,
                     const AttentionParams& p, int64_t window_left) {
    TensorView qv, kv, vv, ov, lv;
    auto set4 = [](TensorView& tv, void* d, int64_t s1, int64_t h, int64_t dim, int64_t ld) {
      tv.data = d;
      tv.dtype = DType::f32;
      tv.device = Device::cpu;
      tv.ndim = 4;
      tv.shape = {1, s1, h, dim};
      tv.strides = {std::max<int64_t>(s1, 1) * ld, ld, dim, 1};
    };
    set4(qv, q.data, T, p.heads, p.head_dim, q.ld);
    set4(ov, out.data, T, p.heads, p.head_dim, out.ld);
    set4(kv, kdata, L, p.kv_heads, p.head_dim, kvd);
    set4(vv, vdata, L, p.kv_heads, p.head_dim, kvd);
    lse_.resize(size_t(p.heads * T));
    lv = TensorView::contiguous(lse_.data(), DType::f32, {1, p.heads, T});
    AttentionOptions o;
    o.scale = p.scale;
    o.causal = true;
    o.window_left = window_left;
    o.softcap = p.softcap;
    o.check_finite = false;
    o.impl = AttentionImpl::flash;
    // Small problems (decode over a short cache, tiny models) cost less than waking a second thread: run them on one.
    o.threads = T * L * p.heads * p.head_dim < (int64_t(1) << 18) ? 1 : threads_;
    attention_forward(qv, kv, vv, ov, lv, o);
  }

  // One query row at position pos against the cache (its own key already stored): what every decode step runs.
  // Global layers and rings that have not wrapped read rows [0, pos] with the window mask. A wrapped ring holds the
  // visible positions (pos - window, pos] in a cyclic run of slots: without slack (capacity == window) that is every
  // slot, read in slot order (softmax is order-free); with slack it is one contiguous run of slots or two, and two
  // runs are attended separately and merged by their log-sum-exp (no copy of the window).
  void attend_one(const Tensor& q, const KVLayer& cache, const Tensor& out, int64_t pos, const AttentionParams& p) {
    const int64_t kvd = p.kv_heads * p.head_dim, cap = cache.capacity;
    if (!cache.ring || pos + 1 <= cap) {
      run_attention(q, cache.k.data, cache.v.data, kvd, pos + 1, out, 1, p, p.window > 0 ? p.window - 1 : -1);
      return;
    }
    const int64_t W = p.window > 0 ? std::min(p.window, cap) : cap;
    if (W == cap) {
      run_attention(q, cache.k.data, cache.v.data, kvd, cap, out, 1, p, -1);
      return;
    }
    const int64_t first = (pos - W + 1) % cap, last = pos % cap;
    auto at = [&](const Tensor& t, int64_t slot) { return static_cast<void*>(frow(t, slot)); };
    if (first <= last) {
      run_attention(q, at(cache.k, first), at(cache.v, first), kvd, W, out, 1, p, -1);
      return;
    }
    // Older run [first, cap), newer run [0, last]: o = (e^lse1 o1 + e^lse2 o2) / (e^lse1 + e^lse2) per head.
    const int64_t H = p.heads, D = p.head_dim;
    seg_out_.resize(size_t(H * D));
    Tensor o1{seg_out_.data(), DType::f32, 1, H * D, H * D};
    run_attention(q, at(cache.k, first), at(cache.v, first), kvd, cap - first, o1, 1, p, -1);
    seg_lse_.assign(lse_.begin(), lse_.begin() + H);
    run_attention(q, cache.k.data, cache.v.data, kvd, last + 1, out, 1, p, -1);
    float* o2 = frow(out, 0);
    for (int64_t h = 0; h < H; ++h) {
      const double l1 = seg_lse_[size_t(h)], l2 = lse_[size_t(h)], m = std::max(l1, l2);
      const double w1 = std::exp(l1 - m), w2 = std::exp(l2 - m), inv = 1.0 / (w1 + w2);
      for (int64_t d = 0; d < D; ++d)
        o2[h * D + d] = float((w1 * seg_out_[size_t(h * D + d)] + w2 * o2[h * D + d]) * inv);
    }
  }

  // A token-tree step (set_step_shape's parent): row t at position pos0 + depth(t) sees the cache before pos0 and its
  // ancestors. Rows are attended one at a time (decode-exact, like attend_one); before row t, the cache rows of
  // positions pos0 .. pos0 + depth(t) are made to hold its root-to-t path (rewritten only where the previous row's
  // path differs). Every row's keys/values are kept aside for kv_commit_tree, which writes the accepted path.
  void tree_attention(const Tensor& q, const Tensor& k, const Tensor& v, const KVLayer& cache, const Tensor& out,
                      int64_t T, const AttentionParams& p) {
    const int64_t kvd = p.kv_heads * p.head_dim;
    TreeKV& st = tree_kv_[cache.k.data];
    st.kvd = kvd;
    st.rows = T;
    st.k.resize(size_t(T * kvd));
    st.v.resize(size_t(T * kvd));
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(st.k.data() + t * kvd, frow(k, t), size_t(kvd) * 4);
      std::memcpy(st.v.data() + t * kvd, frow(v, t), size_t(kvd) * 4);
    }
    std::vector<int32_t> owner;  // owner[d]: the tree row whose keys the cache row of position pos0 + d holds
    std::vector<int32_t> path;
    for (int64_t t = 0; t < T; ++t) {
      path.clear();
      for (int32_t a = int32_t(t); a >= 0; a = parent_[size_t(a)]) path.push_back(a);
      std::reverse(path.begin(), path.end());
      if (owner.size() < path.size()) owner.resize(path.size(), -1);
      for (size_t d = 0; d < path.size(); ++d) {
        if (owner[d] == path[d]) continue;
        const int64_t pos = pos0_ + int64_t(d);
        const int64_t slot = cache.ring ? pos % cache.capacity : pos;
        std::memcpy(frow(cache.k, slot), st.k.data() + path[d] * kvd, size_t(kvd) * 4);
        std::memcpy(frow(cache.v, slot), st.v.data() + path[d] * kvd, size_t(kvd) * 4);
        owner[d] = path[d];
      }
      attend_one(q.row_slice(t, 1), cache, out.row_slice(t, 1), pos0_ + depth_[size_t(t)], p);
    }
  }

  struct TreeKV {  // one tree step's keys and values of one layer's cache (kv_commit_tree copies from here)
    std::vector<float> k, v;
    int64_t kvd = 0, rows = 0;
  };

  // A matrix kept as GGUF blocks (BackendOptions::keep_quantized): Matrix::w.dtype is the marker, Matrix::impl the
  // segments (rows of one part each, in order).
  static constexpr DType kQuantMarker = DType::i32;
  struct QuantMatrix {
    struct Segment {
      model::WeightType type;
      int64_t rows;
      const uint8_t* blocks;  // into the store's mapped file (the model keeps the store alive)
    };
    std::vector<Segment> segments;
  };
  int threads_ = 1;
  bool keep_quant_ = false;
  Isa isa_ = Isa::scalar;
  DType wtype_ = DType::f32;
  std::set<void*> owned_;
  std::vector<int32_t> tokens_;
  int64_t pos0_ = 0;
  std::vector<float> cs_, ktmp_, vtmp_, lse_, seg_out_, seg_lse_;
  bool exact_ = false;                 // decode-exact step (set_step_shape)
  std::vector<int32_t> parent_, depth_;  // tree step (set_step_shape); empty: a chain
  std::map<const void*, TreeKV> tree_kv_;  // per cache (its k buffer): the last tree step's keys and values
  // set_paged_step's inputs (paged_ until the next set_step).
  bool paged_ = false;
  std::vector<int32_t> positions_, row_seq_, tables_, logit_rows_, single_;
  int64_t max_blocks_ = 0;
  ArgmaxResult argmax_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opts) { return std::make_unique<CpuBackend>(opts); }

}  // namespace flashkit::engine
